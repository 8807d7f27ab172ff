"""Checkpoints and datasets on the test stack's real S3 server (SeaweedFS) through the SDK,
and recovery's check of what is there: the path a pod without a shared volume takes."""

import os
import tracemalloc
import uuid
from pathlib import Path

import pytest
import torch

import crucible
from crucible.artifacts import remote
from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.core.recovery import checkpoint_problem
from crucible.db.tables import Checkpoint
from crucible.sdk import CheckpointCorrupt, DatasetCorrupt, TrainState
from tests.object_store import ObjectStore
from tests.sdk.conftest import new_run
from tests.sdk.test_checkpoints import build, train
from tests.sdk.test_datasets_evals import write_dataset


def run_folder(s3: ObjectStore, run_id: int) -> str:
    """A folder of the run's own in the bucket (a storage root of the test server), where
    the API accepts its checkpoints; fresh, since run ids start again with every server."""
    return f"s3://{s3.bucket}/runs/{run_id}/checkpoints-{uuid.uuid4().hex[:10]}"


def test_a_checkpoint_round_trips_through_s3_under_its_attempts_name(
    api: CrucibleClient, sdk_env: Path, s3: ObjectStore
) -> None:
    run_id = new_run(api)
    base = run_folder(s3, run_id)
    run = crucible.init(run_id=run_id, attempt=1, checkpoint_uri=base)
    model, optimizer = build(seed=1)
    train(model, optimizer, 2)
    record = run.save_checkpoint(5, {"train": TrainState(model, optimizer)})
    # No rename on object storage: written in place, under a name no other attempt writes.
    assert record is not None and record.uri == f"{base}/step-00000005.a1"
    found = remote.content(record.uri)
    assert found is not None and (found.digest, found.size_bytes) == (
        record.digest,
        record.size_bytes,
    )
    restored, restored_optimizer = build(seed=2)
    assert run.load_checkpoint({"train": TrainState(restored, restored_optimizer)}) == 5
    for key, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value)
    run.finish()


def test_an_altered_object_is_refused_and_recovery_calls_it_damaged(
    api: CrucibleClient, sdk_env: Path, s3: ObjectStore
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id, attempt=1, checkpoint_uri=run_folder(s3, run_id))
    model, optimizer = build(seed=1)
    record = run.save_checkpoint(3, {"train": TrainState(model, optimizer)})
    assert record is not None
    row = Checkpoint(uri=record.uri, digest=record.digest, size_bytes=record.size_bytes)
    assert checkpoint_problem(row) is None

    fs, root = remote.filesystem(record.uri)
    shard = next(name for name in fs.find(root) if name.endswith(".distcp"))
    data = fs.cat_file(shard)
    fs.pipe_file(shard, bytes([data[0] ^ 0xFF]) + data[1:])  # same size, one byte changed

    with pytest.raises(CheckpointCorrupt) as refused:
        run.load_checkpoint({"train": TrainState(*build(seed=2))})
    assert record.digest in str(refused.value) and record.uri in str(refused.value)
    assert "has digest sha256:" in (checkpoint_problem(row) or "")
    fs.rm(root, recursive=True)
    assert checkpoint_problem(row) == f"{record.uri} is missing"
    run.finish()


def test_recovery_waits_rather_than_retire_when_the_store_does_not_answer(
    s3: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    row = Checkpoint(uri=f"{s3.prefix('ckpt')}/step-1", digest="sha256:" + "0" * 64, size_bytes=1)
    with pytest.raises(remote.StorageUnavailable) as unavailable:
        checkpoint_problem(row)
    assert row.uri in str(unavailable.value)


def test_a_dataset_published_to_s3_is_read_back_verified_by_the_next_run(
    api: CrucibleClient,
    sdk_env: Path,
    s3: ObjectStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outputs = s3.prefix("outputs")
    monkeypatch.setenv("CRUCIBLE_OUTPUTS_URI", outputs)
    producer_id = new_run(api)
    producer = crucible.init(run_id=producer_id)
    data = write_dataset(tmp_path / "sft-data", rows=10)
    version = producer.publish_dataset("s3-sft", data, record_count=10)
    producer.finish()
    assert version.uri == f"{outputs}/sft-data"
    assert version.digest == content_of(data).digest

    monkeypatch.delenv("CRUCIBLE_OUTPUTS_URI")
    consumer_id = new_run(api)
    consumer = crucible.init(run_id=consumer_id)
    read = consumer.input_dataset(f"s3-sft@{version.version}")
    assert read.path.is_dir() and not read.path.is_relative_to(data)
    assert content_of(read.path).digest == version.digest
    assert (read.path / "train.jsonl").read_text() == (data / "train.jsonl").read_text()
    assert [i.dataset_version_id for i in api.list_inputs(consumer_id)] == [version.id]

    fs, root = remote.filesystem(version.uri)
    fs.pipe_file(f"{root}/train.jsonl", b'{"x": 99}\n')  # changed after registration
    monkeypatch.setenv("CRUCIBLE_HOME", str(tmp_path / "other-home"))  # no local copy yet
    fresh = crucible.init(run_id=new_run(api))
    with pytest.raises(DatasetCorrupt) as refused:
        fresh.input_dataset(f"s3-sft@{version.version}")
    assert version.digest in str(refused.value) and version.uri in str(refused.value)
    consumer.finish()
    fresh.finish()


def test_a_large_object_downloads_in_bounded_memory(s3: ObjectStore, tmp_path: Path) -> None:
    """An object of 120 MiB (over s3fs's 50 MiB block, where it fetches ranges concurrently
    and holds them) comes down as one stream: the Python heap peaks far below its size."""
    source = tmp_path / "large.bin"
    with source.open("wb") as out:
        for _ in range(120):
            out.write(os.urandom(2**20))
    uri = f"{s3.prefix('large')}/large.bin"
    remote.upload(source, uri)
    tracemalloc.start()
    try:
        remote.download(uri, tmp_path / "copy.bin")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert content_of(tmp_path / "copy.bin").digest == content_of(source).digest
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB of Python memory"
