"""`crucible worker` for real: Celery over the Redis of scripts/services, Postgres, and the
API in this process. Exactly one EvalJob per checkpoint survives a worker SIGKILLed and Redis
restarted between the database commit and the relay."""

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
