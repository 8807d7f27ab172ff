"""A real `crucible server` process in embedded mode, for tests that drive it as users do."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests import checkpoint_files


@dataclass(frozen=True)
class LocalServer:
    url: str
    home: Path
    env: dict[str, str]  # the environment a CLI or workload needs to reach it
    log: Path
    pid: int

    @property
    def token(self) -> str:
        return (self.home / "token").read_text().strip()


def wait_for(what: str, done: Any, timeout: float) -> Any:
    """Ask `done()` every second until it answers something true, and return that; fail
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := done()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


def crucible(
    env: dict[str, str], *args: str, timeout: float = 180, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the `crucible` CLI as a user would, in `env` (see LocalServer.env), from `cwd`."""
    return subprocess.run(
        [sys.executable, "-m", "crucible", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def app_in_thread(app: Any, startup_seconds: float = 60) -> Iterator[str]:
    """An ASGI `app` under uvicorn on a free 127.0.0.1 port, in a thread of this process;
    yields its base URL and shuts it down (its lifespan's shutdown too) after."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_seconds
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def storage_roots_env(base: Path, extra: list[str] | None = None) -> dict[str, str]:
    """CRUCIBLE_STORAGE_ROOTS for a test server: `base` (the session's temporary folder, where
    tests keep files they register in place), tests/checkpoint_files.py's folder, and the test
    object store's bucket when there is one. Checkpoints still go in a run's folder there."""
    roots = [base.as_uri(), checkpoint_files.ROOT.as_uri(), *(extra or [])]
    if bucket := os.environ.get("CRUCIBLE_S3_BUCKET"):
        roots.append(f"s3://{bucket}")
    return {"CRUCIBLE_STORAGE_ROOTS": json.dumps(roots)}


@contextmanager
def local_server(
    workdir: Path,
    startup_seconds: float = 180,
    command: str = "server",
    *,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[LocalServer]:
    """`crucible server` (API only) or `crucible up` (API and the local executor), with extra
    command-line `args` and `env` (e.g. CRUCIBLE_DATABASE_URL for Postgres)."""
    port = free_port()
    home = workdir / "home"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    environment |= {"CRUCIBLE_HOME": str(home), "CRUCIBLE_API_URL": f"http://127.0.0.1:{port}"}
    environment |= storage_roots_env(workdir.parent)
    environment |= env or {}
    log = workdir / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "crucible", command, "--port", str(port), *args],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(environment["CRUCIBLE_API_URL"], process, log, startup_seconds)
        yield LocalServer(
            url=environment["CRUCIBLE_API_URL"],
            home=home,
            env=environment,
            log=log,
            pid=process.pid,
        )
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, seconds: float) -> None:
    wait_until_serving(f"{url}/readyz", process, log, seconds, what="crucible server")


def wait_until_serving(
    url: str, process: subprocess.Popen[bytes], log: Path, seconds: float, *, what: str
) -> None:
    """Poll `url` until it answers 200; fail with the process's log if it dies or stalls."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{what} did not start:\n" + log.read_text())
        time.sleep(0.2)
