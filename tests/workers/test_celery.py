"""`crucible worker` for real: Celery over the Redis of scripts/services, Postgres, and the
API in this process. Exactly one EvalJob per checkpoint, and exactly one recovery per
interruption, survive a worker SIGKILLed and Redis restarted between the database commit and
the relay."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_checkpoints_datasets import API, register_checkpoint, submit_kind
from tests.conftest import make_project, postgres_only
from tests.workers.test_handlers import end_badly, run_of, running

pytestmark = [pytest.mark.redis, postgres_only]
REPO = Path(__file__).resolve().parents[2]


def broker_url() -> str:
    base = os.environ.get("CRUCIBLE_BROKER_URL", "redis://127.0.0.1:16379/0")
    return base.rsplit("/", 1)[0] + "/7"  # a database of its own on the shared Redis


class Worker:
    def __init__(self, database_url: str, home: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        self.env |= {
            "CRUCIBLE_DATABASE_URL": database_url,
            "CRUCIBLE_BROKER_URL": broker_url(),
            "CRUCIBLE_HOME": str(home),
        }
        self.log = home / "worker.log"
        home.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "crucible", "worker", "--concurrency", "2"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def worker(database_url: str, tmp_path: Path) -> Iterator[Worker]:
    running = Worker(database_url, tmp_path / "worker-home")
    yield running
    running.kill()


def wait_for(what: str, check: Callable[[], bool], worker: Worker, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; worker log:\n{worker.log.read_text()}")
        time.sleep(0.2)


def eval_runs(admin: TestClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = admin.get(f"{API}/runs", params={"kind": "eval"}).json()["items"]
    return items


def restart_redis() -> None:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "services"), "restart-redis", "nosave"],
        check=True,
        capture_output=True,
    )


def test_one_eval_per_checkpoint_through_kills_and_a_redis_restart(
    admin: TestClient, worker: Worker
) -> None:
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", evals=[{"suite": "arithmetic"}])
    worker.start()
    first = register_checkpoint(admin, run["id"], 100)
    wait_for("the first checkpoint's eval", lambda: len(eval_runs(admin)) == 1, worker)

    worker.kill()  # mid-flight work is the relay's to republish
    second = register_checkpoint(admin, run["id"], 200)  # committed; nobody relays it
    restart_redis()  # whatever the broker held is gone
    worker.start()
    wait_for("the second checkpoint's eval", lambda: len(eval_runs(admin)) == 2, worker)
    time.sleep(3)  # let duplicates, if any, arrive
    checkpoints = sorted(r["manifest"]["spec"]["checkpoint"]["id"] for r in eval_runs(admin))
    assert checkpoints == [first["id"], second["id"]]


def recovery_events(admin: TestClient, run_id: int) -> list[dict[str, Any]]:
    events = admin.get(f"{API}/runs/{run_id}/events").json()
    return [e for e in events if e["type"] == "RecoveryScheduled"]


def test_every_interruption_is_recovered_once_through_kills_and_a_redis_restart(
    admin: TestClient, worker: Worker
) -> None:
    """18 runs preempted in three waves: one with the worker up, one while it is dead and
    Redis loses what it held, one racing a second kill. Each interruption gets exactly one
    recovery decision, resuming from the run's checkpoint."""
    make_project(admin)
    runs = [
        submit_kind(admin, "TrainingRun", f"r{i}", recovery={"backoffSeconds": 0})
        for i in range(18)
    ]
    attempts = {run["id"]: running(admin, run["id"]) for run in runs}
    checkpoints = {run["id"]: register_checkpoint(admin, run["id"], 100)["id"] for run in runs}

    def preempt(wave: list[dict[str, Any]]) -> None:
        for run in wave:
            end_badly(admin, run["id"], attempts[run["id"]], "Preempted", 143)

    def recovered(wave: list[dict[str, Any]]) -> bool:
        return all(run_of(admin, run["id"])["phase"] == "Scheduling" for run in wave)

    worker.start()
    preempt(runs[:6])
    wait_for("the first wave's recoveries", lambda: recovered(runs[:6]), worker)
    worker.kill()
    preempt(runs[6:12])  # committed with their outbox messages; no worker to relay them
    restart_redis()
    worker.start()
    preempt(runs[12:15])
    worker.kill()  # somewhere in the middle of these
    worker.start()
    preempt(runs[15:])
    wait_for("every recovery", lambda: recovered(runs), worker, seconds=120)
    time.sleep(3)  # let duplicates, if any, arrive

    for run in runs:
        decided = recovery_events(admin, run["id"])
        assert len(decided) == 1, (run["name"], decided)
        assert decided[0]["data"]["resume_checkpoint_id"] == checkpoints[run["id"]]
        after = run_of(admin, run["id"])
        assert (after["next_attempt_reason"], after["attempt_count"]) == ("preemption", 1)
