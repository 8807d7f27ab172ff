"""A workload whose checkpoint or dataset no longer matches its registered digest: the SDK
refuses it, and the run fails with the SDK's sentence, read back through the API of a real
`crucible up` (API, local executor, workers) that ran the workload."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.schemas.runs import RunPublic, RunSubmit
from tests.servers import local_server

pytestmark = pytest.mark.slow

TRUNCATES_ITS_CHECKPOINT = """
from pathlib import Path
import torch
import crucible.sdk as sdk
from crucible.jobs.process import run_job

def body():
    run = sdk.init()
    record = run.save_checkpoint(10, {"weights": torch.ones(1000)})
    shard = next(p for p in Path(record.uri.removeprefix("file://")).iterdir()
                 if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:100])
    run.load_checkpoint({"weights": torch.zeros(1000)})
    run.finish()

run_job("truncated-checkpoint", body)
"""

READS_A_DATASET = """
import crucible.sdk as sdk
from crucible.jobs.process import run_job

def body():
    run = sdk.init()
    run.input_dataset("prompts@1")
    run.finish()

run_job("changed-dataset", body)
"""


def manifest(name: str, code: str) -> dict[str, object]:
    return {
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "experiment": "integrity",
            "command": [sys.executable, "-c", code],
            "recovery": {"maxFailures": 0},  # the first failure is the run's
        },
    }


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrucibleClient]:
    workdir = tmp_path_factory.mktemp("up")
    with (
        local_server(workdir, startup_seconds=180, command="up") as server,
        CrucibleClient(server.url, server.token) as client,
    ):
        yield client


def finished(api: CrucibleClient, run: RunPublic) -> RunPublic:
    deadline = time.monotonic() + 240  # the workload imports torch
    while (now := api.get_run(run.id)).phase.value not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"run {run.name} still {now.phase.value}"
        time.sleep(0.5)
    return now


def test_a_run_whose_checkpoint_was_truncated_fails_naming_both_digests(
    api: CrucibleClient,
) -> None:
    run = api.submit_run(
        RunSubmit.model_validate(
            {"project": "default", "manifest": manifest("truncates", TRUNCATES_ITS_CHECKPOINT)}
        )
    )
    done = finished(api, run)
    (checkpoint,) = api.list_checkpoints(run.id).items
    (attempt,) = api.list_attempts(run.id)

    assert (done.phase.value, done.reason) == ("Failed", "ErrorExit"), done.message
    for said in (done.message, attempt.message):
        assert f"checkpoint {checkpoint.id} (step 10" in said, said
        assert f"expected {checkpoint.digest}" in said and "found sha256:" in said, said
        assert "not loaded" in said, said
    assert (attempt.end_reason, attempt.exit_code) == ("ErrorExit", 1)


def test_a_run_whose_dataset_changed_after_registration_fails_naming_both_digests(
    api: CrucibleClient, tmp_path: Path
) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"p": "1+1="}\n')
    version = api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "prompts",
                "uri": data.as_uri(),
                "digest": content_of(data).digest,
            }
        )
    )
    data.write_text('{"p": "1+2="}\n')
    run = api.submit_run(
        RunSubmit.model_validate(
            {"project": "default", "manifest": manifest("reads-prompts", READS_A_DATASET)}
        )
    )
    done = finished(api, run)
    (attempt,) = api.list_attempts(run.id)

    assert (done.phase.value, done.reason) == ("Failed", "ErrorExit"), done.message
    for said in (done.message, attempt.message):
        assert "dataset prompts@1" in said, said
        assert f"expected {version.digest}" in said and "found sha256:" in said, said
    assert (attempt.end_reason, attempt.exit_code) == ("ErrorExit", 1)
    assert api.list_inputs(run.id) == [], "a refused dataset is not recorded as an input"
