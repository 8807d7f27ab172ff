"""Fault 5: the checkpoint volume fills up in the middle of a save. The attempt ends with a
reason that says so, the checkpoint before it stays intact and registered, nothing of the
half-written one is registered or left behind, and the next attempt resumes from the last
complete checkpoint. A real `crucible up` (API, local executor, workers) runs a workload
that checkpoints onto a 512 kB tmpfs."""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.client import CrucibleClient
from crucible.schemas.runs import RunSubmit
from tests.servers import local_server

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

# 200 kB of weights fit the volume; the next checkpoint's 600 kB do not.
WORKLOAD = """
import torch
import crucible.sdk as sdk
from crucible.jobs.process import run_job

def body():
    run = sdk.init()
    state = {"weights": torch.zeros(50_000)}
    step = run.load_checkpoint(state)
    if step is not None:
        assert bool((state["weights"] == 1).all()), "the resumed weights are not step 100's"
        print(f"resumed from step {step}", flush=True)
        run.finish()
        return
    run.save_checkpoint(100, {"weights": torch.ones(50_000)})
    run.save_checkpoint(200, {"weights": torch.ones(150_000)})
    run.finish()

run_job("fill-the-volume", body)
"""


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "checkpoint-volume"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0777", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"this test mounts a 512 kB tmpfs and needs root to: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_a_full_volume_ends_the_attempt_clearly_and_recovery_resumes_from_the_last_complete(
    tmp_path: Path, small_volume: Path
) -> None:
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": "fills-its-volume"},
        "spec": {
            "experiment": "faults",
            "command": [sys.executable, "-c", WORKLOAD],
            "checkpoints": {"storage": small_volume.as_uri()},
            "recovery": {"maxFailures": 1, "backoffSeconds": 0},
        },
    }
    with (
        local_server(
            tmp_path,
            startup_seconds=180,
            command="up",
            # The volume is storage of this installation's, as a mounted disk would be.
            env={"CRUCIBLE_STORAGE_ROOTS": json.dumps([small_volume.as_uri() + "/"])},
        ) as server,
        CrucibleClient(server.url, (server.home / "token").read_text().strip()) as api,
    ):
        run = api.submit_run(RunSubmit(project="default", manifest=manifest))  # type: ignore[arg-type]
        deadline = time.monotonic() + 180
        while api.get_run(run.id).phase.value not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.5)
        finished = api.get_run(run.id)
        first, second = api.list_attempts(run.id)
        checkpoints = api.list_checkpoints(run.id).items

    assert finished.phase.value == "Succeeded", (finished.reason, finished.message)
    assert first.end_reason == "ErrorExit"
    assert "checkpoint at step 200 could not be written" in first.message
    assert "is full" in first.message and "earlier checkpoints are intact" in first.message
    assert [c.step for c in checkpoints] == [100]  # the half-written one was never registered
    assert second.resumed_from_checkpoint_id == checkpoints[0].id
    assert second.end_reason == "Completed"
    log = (server.home / "runs" / str(run.id) / "attempt-2.log").read_text()
    assert "resumed from step 100" in log  # its digest checked, its weights loaded
    written = small_volume / "runs" / str(run.id) / "checkpoints"
    assert sorted(p.name for p in written.iterdir()) == ["step-00000100"]
