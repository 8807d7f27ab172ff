"""A real `crucible server` process for the SDK, which the SDK reaches over HTTP like a
workload does. The server can be stopped and started again on the same port and database,
to test the SDK against an API that goes away and comes back."""

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from crucible.client import CrucibleClient
from crucible.schemas.runs import AttemptStart, RunSubmit
from tests.conftest import ADMIN_TOKEN, training_run
from tests.servers import storage_roots_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        self.env |= {
            "CRUCIBLE_HOME": str(root / "home"),
            "CRUCIBLE_API_URL": self.url,
            "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN,
            **storage_roots_env(root.parent),
        }
        self.log_file = root / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_file.open("a") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "crucible", "server", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120  # imports alone take 15 s on a busy 2-core box
        while True:
            try:
                if httpx.get(f"{self.url}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._process.kill()
                pytest.fail("server did not start:\n" + self.log_file.read_text())
            time.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server per module: starting one costs a second or two; tests use their own runs."""
    process = ServerProcess(tmp_path_factory.mktemp("server"))
    process.start()
    yield process
    process.stop()


@pytest.fixture
def api(server: ServerProcess) -> Iterator[CrucibleClient]:
    with CrucibleClient(server.url, ADMIN_TOKEN) as client:
        yield client


def new_run(api: CrucibleClient, *, attempt: bool = True) -> int:
    """A fresh TrainingRun in the default project, with attempt 1 started."""
    manifest = training_run(name=f"sdk-{uuid.uuid4().hex[:10]}")
    run = api.submit_run(RunSubmit.model_validate({"project": "default", "manifest": manifest}))
    if attempt:
        api.start_attempt(run.id, AttemptStart())
    return run.id


@pytest.fixture
def sdk_env(server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environment a workload gets from the executor, less the run id; returns its home."""
    for name in list(os.environ):
        if name.startswith("CRUCIBLE_"):
            monkeypatch.delenv(name)
    # The server's own, as the executor gives it: a run's checkpoints go in its folder there.
    home = server.root / "home"
    monkeypatch.setenv("CRUCIBLE_HOME", str(home))
    monkeypatch.setenv("CRUCIBLE_API_URL", server.url)
    monkeypatch.setenv("CRUCIBLE_TOKEN", ADMIN_TOKEN)
    return home


@pytest.fixture(autouse=True)
def _sdk_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="crucible")
