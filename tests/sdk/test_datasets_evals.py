"""Datasets a run reads and writes, and the evals it records, with their lineage."""

from pathlib import Path

import pytest
import torch

import crucible
from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.schemas.runs import RunSubmit
from crucible.sdk import DatasetCorrupt
from tests.sdk.conftest import new_run


def write_dataset(root: Path, rows: int) -> Path:
    root.mkdir(parents=True)
    (root / "train.jsonl").write_text("".join(f'{{"x": {i}}}\n' for i in range(rows)))
    (root / "meta").mkdir()
    (root / "meta" / "info.txt").write_text("arithmetic")
    return root


def test_published_dataset_is_linked_to_its_run_and_read_by_the_next(
    api: CrucibleClient, sdk_env: Path, tmp_path: Path
) -> None:
    producer_id = new_run(api)
    producer = crucible.init(run_id=producer_id)
    data = write_dataset(tmp_path / "sft-data", rows=10)
    version = producer.publish_dataset("arith-sft", data, record_count=10, schema={"x": "int"})
    producer.finish()
    assert version.produced_by_run_id == producer_id and version.record_count == 10
    assert version.digest == content_of(data).digest and version.uri == data.as_uri()
    graph = api.lineage("run", producer_id, direction="downstream")
    assert {"type": "dataset_version", "id": version.id} in [
        {"type": n["type"], "id": n["id"]} for n in graph["nodes"]
    ]

    consumer_id = new_run(api)
    consumer = crucible.init(run_id=consumer_id)
    read = consumer.input_dataset("arith-sft@latest")
    consumer.finish()
    assert read.path == data and read.version.id == version.id
    assert [i.dataset_version_id for i in api.list_inputs(consumer_id)] == [version.id]


def test_changed_dataset_is_refused_naming_both_digests(
    api: CrucibleClient, sdk_env: Path, tmp_path: Path
) -> None:
    run = crucible.init(run_id=new_run(api))
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"p": "1+1="}\n')
    version = run.publish_dataset("prompts", data)
    assert version.digest == content_of(data).digest
    data.write_text('{"p": "1+2="}\n')

    with pytest.raises(DatasetCorrupt) as refused:
        run.input_dataset(f"prompts@{version.version}")
    message = str(refused.value)
    assert f"dataset prompts@{version.version}" in message
    assert f"expected {version.digest}" in message and "found sha256:" in message
    assert api.list_inputs(run.id) == [], "a refused dataset is not recorded as an input"
    run.finish()


def test_record_eval_is_attributed_to_the_eval_run(
    api: CrucibleClient, sdk_env: Path, tmp_path: Path
) -> None:
    trainer = crucible.init(run_id=new_run(api))
    checkpoint = trainer.save_checkpoint(1, {"w": torch.ones(3)})
    trainer.finish()
    assert checkpoint is not None

    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "EvalJob",
        "metadata": {"name": f"eval-{trainer.id}"},
        "spec": {
            "experiment": "exp",
            "checkpoint": {"run": api.get_run(trainer.id).name},
            "suite": "arith-heldout",
        },
    }
    eval_run = api.submit_run(
        RunSubmit.model_validate({"project": "default", "manifest": manifest})
    )
    evaluator = crucible.init(run_id=eval_run.id)
    result = evaluator.record_eval(checkpoint.id, "arith-heldout", {"accuracy": 0.75})
    evaluator.finish()
    assert result.eval_run_id == evaluator.id and result.checkpoint_id == checkpoint.id
    assert result.scores == {"accuracy": 0.75}
