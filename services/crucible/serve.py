"""Start the API under uvicorn, after the embedded-mode bootstrap."""

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from rich.console import Console

from crucible.api.app import create_app
from crucible.client import CrucibleClient
from crucible.core.bootstrap import bootstrap_local
from crucible.core.tokens import rotate_service_token
from crucible.db.engine import transaction
from crucible.domain.errors import CrucibleError
from crucible.executor import isolation
from crucible.executor.gpus import GpuPool, detect_gpus
from crucible.executor.local import LocalExecutor
from crucible.settings import Settings, load_settings
from crucible.workers.inprocess import InProcessWorkers

console = Console(stderr=True)


def serve_api(
    settings: Settings,
    *,
    host: str,
    port: int,
    workers: int = 1,
    worker_healthcheck_timeout: int = 30,
) -> None:
    if workers > 1:
        if settings.is_sqlite:
            raise CrucibleError(
                f"--workers {workers} needs Postgres (CRUCIBLE_DATABASE_URL); "
                "the embedded SQLite database takes one API process"
            )
        # Each worker process builds its own app (and engine) from the environment.
        console.print(f"Crucible API on http://{host}:{port} with {workers} workers")
        uvicorn.run(
            "crucible.serve:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            timeout_worker_healthcheck=worker_healthcheck_timeout,
            log_level="warning",
            **proxy_options(settings),
        )
        return
    app = create_app(settings)
    if settings.is_sqlite:
        announce_local(settings, app)
    console.print(f"Crucible API on http://{host}:{port}  (docs: http://{host}:{port}/docs)")
    uvicorn.run(app, host=host, port=port, log_level="warning", **proxy_options(settings))


def proxy_options(settings: Settings) -> dict[str, Any]:
    """Forwarded headers only from the proxies the operator of this server named: uvicorn
    otherwise believes X-Forwarded-For from 127.0.0.1, so any local process could pose as
    any address (and dodge, or aim, the failed-authentication throttle)."""
    if not settings.trusted_proxies:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": settings.trusted_proxies}


def serve_up(
    settings: Settings,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """The embedded all-in-one: API on SQLite, the local executor and the workers in this
    process. `on_ready(api_url)` runs in a thread once the API answers (the demo)."""
    if not settings.is_sqlite:
        raise CrucibleError(
            "`crucible up` is the embedded mode; with Postgres run "
            "`crucible server`, `crucible worker` and `crucible operator`"
        )
    app = create_app(settings)
    announce_local(settings, app)
    with transaction(app.state.session_factory) as session:
        executor_token = rotate_service_token(session=session, name="local executor")
    api_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"  # noqa: S104
    gpus = detect_gpus()
    executor = LocalExecutor(
        CrucibleClient(api_url, executor_token),
        api_url=api_url,
        home=settings.home,
        gpus=GpuPool(gpus),
        isolation=isolation.config_from(settings),
    )
    workers = InProcessWorkers(app.state.session_factory)
    stop = threading.Event()
    threads = [
        threading.Thread(target=executor.run, args=(stop,), name="executor", daemon=True),
        threading.Thread(target=workers.run, args=(stop,), name="workers", daemon=True),
    ]
    for thread in threads:
        thread.start()
    console.print(
        f"Crucible on http://{host}:{port}  (API docs: /docs; executor: "
        f"{len(gpus)} GPUs, run isolation {isolation.describe(executor.isolated)}; "
        f"logs and checkpoints in {settings.home / 'runs'})"
    )
    if on_ready is not None:
        threading.Thread(
            target=_when_serving, args=(api_url, on_ready), name="on-ready", daemon=True
        ).start()
    exit_on_sigterm()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", **proxy_options(settings))
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def exit_on_sigterm() -> None:
    """Make SIGTERM unwind `crucible up` rather than end it where it stands.

    uvicorn shuts down on SIGTERM and then raises the signal again; under SIGTERM's default
    action that killed the process before `finally` stopped the executor, so `kill`, a
    service manager or a timeout stopping `crucible up` left every job running with nobody
    to report or stop it. As SystemExit the executor's shutdown runs: each job gets SIGTERM,
    as a node drain gives it, and the grace period to checkpoint."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def _when_serving(api_url: str, on_ready: Callable[[str], None]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api_url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    on_ready(api_url)


def announce_local(settings: Settings, app: FastAPI) -> None:
    result = bootstrap_local(settings, app.state.session_factory)
    if result.new_token is None:
        return
    # Redirected output ends up in log files and CI artifacts: a secret goes only to a person
    # at a terminal; anyone else reads it from the mode-600 file.
    if console.file.isatty():
        console.print("[bold]Admin token (shown once):[/bold]")
        console.print(result.new_token, highlight=False, soft_wrap=True)
    console.print(f"Admin token saved for your CLI in {settings.local_token_file} (mode 600)")


def app_from_env() -> FastAPI:
    return create_app(load_settings())
