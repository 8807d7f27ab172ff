"""`run.save_checkpoint` / `run.load_checkpoint`: DCP, atomic, registered once complete,
verified before use."""

from pathlib import Path

import pytest
import torch

import crucible
import crucible.sdk.checkpoint as checkpoint_module
from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.sdk import CheckpointCorrupt, Run, TrainState
from tests.object_store import ObjectStore
from tests.sdk.conftest import new_run


def build(seed: int) -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randn(32, 8, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_round_trip_registers_digest_and_size(api: CrucibleClient, sdk_env: Path) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id, attempt=1)
    model, optimizer = build(seed=1)
    train(model, optimizer, 3)
    record = run.save_checkpoint(3, {"train": TrainState(model, optimizer)}, meta={"loss": 0.5})

    final = sdk_env / "runs" / str(run_id) / "checkpoints" / "step-00000003"
    assert record is not None
    assert record.uri == final.as_uri()
    assert (record.digest, record.size_bytes) == (
        content_of(final).digest,
        content_of(final).size_bytes,
    )
    assert record.attempt_id is not None and record.meta == {"loss": 0.5}
    assert [p.name for p in final.parent.iterdir()] == ["step-00000003"], "no temp dir left"

    restored_model, restored_optimizer = build(seed=2)
    assert not torch.equal(restored_model.state_dict()["0.weight"], model.state_dict()["0.weight"])
    assert run.load_checkpoint({"train": TrainState(restored_model, restored_optimizer)}) == 3
    for a, b in zip(model.parameters(), restored_model.parameters(), strict=True):
        assert torch.equal(a, b)
    saved = optimizer.state_dict()["state"]
    loaded = restored_optimizer.state_dict()["state"]
    assert torch.equal(saved[0]["exp_avg"], loaded[0]["exp_avg"])
    # Both continue identically: the optimizer state really came back.
    train(model, optimizer, 2)
    train(restored_model, restored_optimizer, 2)
    assert torch.equal(model.state_dict()["2.weight"], restored_model.state_dict()["2.weight"])
    run.finish()


def test_fresh_run_has_nothing_to_resume(api: CrucibleClient, sdk_env: Path) -> None:
    run = crucible.init(run_id=new_run(api))
    model, optimizer = build(seed=1)
    assert run.load_checkpoint({"train": TrainState(model, optimizer)}) is None
    run.finish()


def test_truncated_checkpoint_is_refused_naming_both_digests(
    api: CrucibleClient, sdk_env: Path
) -> None:
    run = crucible.init(run_id=new_run(api))
    model, optimizer = build(seed=1)
    record = run.save_checkpoint(10, {"train": TrainState(model, optimizer)})
    assert record is not None
    path = Path(record.uri.removeprefix("file://"))
    shard = next(p for p in path.iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:100])

    with pytest.raises(CheckpointCorrupt) as refused:
        run.load_checkpoint({"train": TrainState(*build(seed=2))})
    message = str(refused.value)
    assert f"checkpoint {record.id} (step 10" in message
    assert f"expected {record.digest}" in message
    assert "found sha256:" in message and "not loaded" in message
    run.finish()


def test_a_failed_write_is_never_registered(
    api: CrucibleClient, sdk_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    model, optimizer = build(seed=1)
    real_save = checkpoint_module.dcp_save  # type: ignore[attr-defined]

    def dies_half_way(state_dict: object, *, storage_writer: object, **_: object) -> None:
        directory = Path(storage_writer.path)  # type: ignore[attr-defined]
        directory.mkdir(parents=True)
        (directory / "__0_0.distcp").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "dcp_save", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        run.save_checkpoint(5, {"train": TrainState(model, optimizer)})
    directory = sdk_env / "runs" / str(run_id) / "checkpoints"
    assert [p.name for p in directory.iterdir()] == [".tmp-step-00000005"]
    assert api.latest_checkpoint(run_id) is None

    monkeypatch.setattr(checkpoint_module, "dcp_save", real_save)
    record = run.save_checkpoint(5, {"train": TrainState(model, optimizer)})
    assert record is not None and api.latest_checkpoint(run_id) == record
    assert [p.name for p in directory.iterdir()] == ["step-00000005"], "the retry cleaned up"
    run.finish()


def test_resume_from_names_an_older_checkpoint(
    api: CrucibleClient, sdk_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    model, optimizer = build(seed=1)
    first = run.save_checkpoint(1, {"train": TrainState(model, optimizer)})
    train(model, optimizer, 1)
    second = run.save_checkpoint(2, {"train": TrainState(model, optimizer)})
    run.finish()
    assert first is not None and second is not None

    monkeypatch.setenv("CRUCIBLE_RESUME_FROM", str(first.id))
    resumed = crucible.init(run_id=run_id)
    assert resumed.load_checkpoint({"train": TrainState(*build(seed=3))}) == 1
    resumed.finish()
    monkeypatch.setenv("CRUCIBLE_RESUME_FROM", second.uri)
    by_uri = crucible.init(run_id=run_id)
    assert by_uri.load_checkpoint({"train": TrainState(*build(seed=3))}) == 2
    by_uri.finish()


def test_async_save_registers_in_the_background(api: CrucibleClient, sdk_env: Path) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    model, optimizer = build(seed=1)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    assert run.save_checkpoint(7, {"train": TrainState(model, optimizer)}, async_save=True) is None
    train(model, optimizer, 2)  # the save copied the state first, so this is not in it
    record = run.wait_for_checkpoint()
    assert record is not None and record.step == 7
    assert api.latest_checkpoint(run_id) == record

    restored, restored_optimizer = build(seed=2)
    run.load_checkpoint({"train": TrainState(restored, restored_optimizer)})
    for key, value in restored.state_dict().items():
        assert torch.equal(value, expected[key])
    run.finish()


def test_fsspec_storage_round_trip(api: CrucibleClient, sdk_env: Path, s3: ObjectStore) -> None:
    """Object storage goes through fsspec; the run's folder of the bucket (a storage root of
    the test server) is where the API accepts its checkpoints."""
    run_id = new_run(api)
    base = f"s3://{s3.bucket}/runs/{run_id}/checkpoints"
    run = crucible.init(run_id=run_id, checkpoint_uri=base)
    model, optimizer = build(seed=1)
    record = run.save_checkpoint(4, {"train": TrainState(model, optimizer)})
    assert record is not None and record.uri.startswith(f"{base}/step-00000004")
    restored, restored_optimizer = build(seed=2)
    assert run.load_checkpoint({"train": TrainState(restored, restored_optimizer)}) == 4
    assert torch.equal(restored.state_dict()["0.weight"], model.state_dict()["0.weight"])
    run.finish()


def staged_buffers(run: Run) -> tuple[object, dict[str, int]]:
    """The writer the run's async saves go through and where its staged tensors live."""
    writer = run._checkpoint_store._async_writer_cached
    cache = writer.state_dict_cache
    weights = cache["train"]["model"]
    return writer, {key: tensor.data_ptr() for key, tensor in weights.items()}


def test_async_saves_reuse_one_writer_and_its_staged_buffers(
    api: CrucibleClient, sdk_env: Path
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    model, optimizer = build(seed=1)
    train(model, optimizer, 1)
    expected: dict[int, dict[str, torch.Tensor]] = {}
    seen = []
    for step in (1, 2, 3):
        expected[step] = {k: v.clone() for k, v in model.state_dict().items()}
        run.save_checkpoint(step, {"train": TrainState(model, optimizer)}, async_save=True)
        seen.append(staged_buffers(run))
        train(model, optimizer, 1)  # changes the weights while the save is written
    run.wait_for_checkpoint()

    writers = {id(writer) for writer, _ in seen}
    assert len(writers) == 1, "one writer for every async save"
    assert seen[0][1] == seen[1][1] == seen[2][1], "the staged copies reuse the same buffers"
    records = api.list_checkpoints(run_id).items
    assert sorted(c.step for c in records) == [1, 2, 3]
    for record in records:  # each holds the weights of its step, not the later ones
        reader = crucible.init(run_id=run_id, resume_from=str(record.id))
        restored, restored_optimizer = build(seed=2)
        assert reader.load_checkpoint({"train": TrainState(restored, restored_optimizer)}) == (
            record.step
        )
        for key, value in restored.state_dict().items():
            assert torch.equal(value, expected[record.step][key]), (record.step, key)
        reader.finish()

    # A state of another layout does not fit the buffers: it gets a writer of its own.
    wider = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    wider_optimizer = torch.optim.AdamW(wider.parameters(), lr=1e-2)
    train(wider, wider_optimizer, 1)
    run.save_checkpoint(4, {"train": TrainState(wider, wider_optimizer)}, async_save=True)
    writer, buffers = staged_buffers(run)
    assert id(writer) not in writers
    assert buffers["0.weight"] != seen[0][1]["0.weight"]
    record = run.wait_for_checkpoint()
    assert record is not None and record.step == 4
    run.finish()


def test_async_saves_to_fsspec_storage_reuse_the_writer(
    api: CrucibleClient, sdk_env: Path, s3: ObjectStore
) -> None:
    run_id = new_run(api)
    base = f"s3://{s3.bucket}/runs/{run_id}/checkpoints"
    run = crucible.init(run_id=run_id, checkpoint_uri=base)
    model, optimizer = build(seed=1)
    train(model, optimizer, 1)
    run.save_checkpoint(1, {"train": TrainState(model, optimizer)}, async_save=True)
    first = staged_buffers(run)
    train(model, optimizer, 1)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    run.save_checkpoint(2, {"train": TrainState(model, optimizer)}, async_save=True)
    assert staged_buffers(run) == first
    train(model, optimizer, 1)
    record = run.wait_for_checkpoint()
    assert record is not None and record.uri.startswith(f"{base}/step-00000002")
    restored, restored_optimizer = build(seed=2)
    assert run.load_checkpoint({"train": TrainState(restored, restored_optimizer)}) == 2
    for key, value in restored.state_dict().items():
        assert torch.equal(value, expected[key])
    run.finish()
