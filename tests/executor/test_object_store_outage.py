"""Fault 6: the S3 server goes down between two checkpoints of a run that keeps them there.
The attempt ends with a reason that names the storage, nothing of the failed save is
registered, recovery waits (rather than retire a checkpoint it cannot see) until the store
answers again, and the next attempt resumes from the last intact checkpoint. A real
`crucible up` (API, local executor, workers) and a private SeaweedFS of scripts/objectstore,
whose S3 gateway is stopped and started as an outage would."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crucible.artifacts import remote
from crucible.client import CrucibleClient
from crucible.schemas.runs import RunSubmit
from tests.object_store import ObjectStore, point_at
from tests.servers import local_server

# toolchain: its S3 server is the weed binary scripts/cluster builds (scripts/test runs it
# after that build).
pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.toolchain]

REPO = Path(__file__).resolve().parents[2]
OBJECTSTORE = REPO / "scripts" / "objectstore"

# Saves step 100, says so, waits for the test to take the store down, then saves step 200.
WORKLOAD = """
import sys, time
from pathlib import Path
import torch
import crucible.sdk as sdk
from crucible.jobs.process import run_job

saved, go = Path(sys.argv[1]), Path(sys.argv[2])

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
    saved.touch()
    while not go.exists():
        time.sleep(0.1)
    run.save_checkpoint(200, {"weights": torch.full((50_000,), 2.0)})
    run.finish()

run_job("outlive-the-store", body)
"""


@dataclass(frozen=True)
class PrivateStore:
    store: ObjectStore
    env: dict[str, str]  # where scripts/objectstore keeps this one

    def script(self, command: str) -> None:
        done = subprocess.run(
            [str(OBJECTSTORE), command], env=self.env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"scripts/objectstore {command}: {done.stderr[-2000:]}"


@pytest.fixture
def private_store(tmp_path: Path) -> Iterator[PrivateStore]:
    """A store of this test's own, so its outage touches no other test."""
    env = {
        **os.environ,
        "CRUCIBLE_OBJECTSTORE_DIR": str(tmp_path / "objectstore"),
        "CRUCIBLE_OBJECTSTORE_HOST": "127.0.0.1",
        # Not the shared store's 18333; weed's other servers take ports offset from it.
        "CRUCIBLE_OBJECTSTORE_PORT": "18433",
    }
    done = subprocess.run(
        [str(OBJECTSTORE), "up"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    exported = dict(line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines())
    store = ObjectStore.from_exports(exported)
    try:
        yield PrivateStore(store, env)
    finally:
        subprocess.run([str(OBJECTSTORE), "down"], env=env, capture_output=True, timeout=120)


def test_the_store_going_down_ends_the_attempt_clearly_and_the_run_resumes_once_it_is_back(
    tmp_path: Path,
    private_store: PrivateStore,
    monkeypatch: pytest.MonkeyPatch,
    forget_s3_clients: None,
) -> None:
    store = private_store.store
    base = store.prefix("ckpt")
    saved, go = tmp_path / "saved", tmp_path / "go"
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": "outlives-its-store"},
        "spec": {
            "experiment": "faults",
            "command": [sys.executable, "-c", WORKLOAD, str(saved), str(go)],
            "checkpoints": {"storage": base},
            "recovery": {"maxFailures": 1, "backoffSeconds": 0},
        },
    }
    with (
        local_server(
            tmp_path,
            startup_seconds=180,
            command="up",
            # The bucket is storage of this installation's: a spec may keep checkpoints there.
            env=store.client_env | {"CRUCIBLE_STORAGE_ROOTS": json.dumps([base + "/"])},
        ) as server,
        CrucibleClient(server.url, server.token) as api,
    ):
        run = api.submit_run(RunSubmit(project="default", manifest=manifest))  # type: ignore[arg-type]
        deadline = time.monotonic() + 180
        while not saved.exists():
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.2)
        private_store.script("stop")  # the outage: the S3 endpoint stops answering
        go.touch()
        while not (attempts := api.list_attempts(run.id)) or attempts[0].end_reason is None:
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.5)
        # The workers decide while the store is still down: they wait, and say why.
        while not (waiting := [e for e in api.list_events(run.id) if e.type == "RecoveryWaiting"]):
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.5)
        during = api.get_run(run.id)
        private_store.script("start")
        while api.get_run(run.id).phase.value not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline + 120, server.log.read_text()[-3000:]
            time.sleep(0.5)
        finished = api.get_run(run.id)
        first, second = api.list_attempts(run.id)
        checkpoints = api.list_checkpoints(run.id).items
        log = (server.home / "runs" / str(run.id) / "attempt-2.log").read_text()

    assert first.end_reason == "ErrorExit"
    assert "checkpoint at step 200 could not be written" in first.message, first.message
    assert f"could not be written to {base}/runs/{run.id}/" in first.message, first.message
    assert "EndpointConnectionError" in first.message, first.message
    # Nothing was decided from a store that did not answer: no checkpoint retired, no restart
    # from scratch; the run said why it waited.
    assert during.phase.value == "Interrupted", (during.phase, during.message)
    assert waiting and "storage" in waiting[0].message, waiting
    assert finished.phase.value == "Succeeded", (finished.reason, finished.message)
    assert [c.step for c in checkpoints] == [100]  # the failed save registered nothing
    assert second.resumed_from_checkpoint_id == checkpoints[0].id
    assert "resumed from step 100" in log  # its digest checked on S3, its weights loaded
    point_at(store, monkeypatch)
    fs, root = remote.filesystem(f"{base}/runs/{run.id}/checkpoints")
    assert [name.rsplit("/", 1)[-1] for name in fs.ls(root)] == ["step-00000100.a1"]
