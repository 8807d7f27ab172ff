"""The Kubernetes backend as deployed, as processes: `crucible server` on its own Postgres
database, `crucible worker` (Celery on the Redis of scripts/services) and `crucible
operator` against the local cluster. Tests kill and restart these like an outage would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

from crucible.db import schema
from crucible.db.tables import OutboxMessage
from crucible.settings import Settings, load_settings
from crucible.workers.celery_app import HANDLE_TASK, create_celery
from crucible.workers.relay import republish_wait
from tests.conftest import postgres_url
from tests.outbox_probe import handler_copies
from tests.servers import free_port, storage_roots_env, wait_until_serving

ADMIN_TOKEN = "cru_operator-test-admin"


def _fresh_database(suffix: str) -> str:
    url = make_url(postgres_url())
    name = f"{url.database}_{suffix}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    fresh = url.set(database=name)
    engine = create_engine(fresh)
    schema.upgrade(engine)
    engine.dispose()
    return fresh.render_as_string(hide_password=False)


def _fresh_broker(database: int) -> str:
    """A Redis database of its own on the shared Redis, emptied: messages left by an earlier
    stack name outbox ids of another database, which in this one's are other messages (and
    a backlog of them is work the new worker would do first)."""
    base = os.environ.get("CRUCIBLE_BROKER_URL", "redis://127.0.0.1:16379/0")
    url = base.rsplit("/", 1)[0] + f"/{database}"
    with redis.Redis.from_url(url) as broker:
        broker.flushdb()
    return url


class Process:
    """One `crucible ...` command (or `program`) in its own process group, logging to a
    file."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        log: Path,
        program: list[str] | None = None,
    ) -> None:
        self.name, self.args, self.env, self.log = name, args, env, log
        self.program = program or [sys.executable, "-m", "crucible"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [*self.program, *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self, signum: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signum)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def tail(self, lines: int = 60) -> str:
        text_ = self.log.read_text() if self.log.exists() else ""
        return f"--- {self.name} log (tail) ---\n" + "\n".join(text_.splitlines()[-lines:])


class ControlPlane:
    """A running control plane, read through its REST API as a user reads it: the processes
    of a Stack, or the pods of a Helm release."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def logs(self) -> str:
        """What to show when a wait times out."""
        return ""

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(f"/api/v1{path}", params=params)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: Any = None) -> Any:
        response = self.http.post(f"/api/v1{path}", json=body)
        assert response.is_success, f"POST {path}: {response.status_code} {response.text}"
        return response.json()

    def run_by_name(self, namespace: str, name: str) -> dict[str, Any] | None:
        runs = self.get("/runs", project=namespace, limit=1000)["items"]
        return next((r for r in runs if r["name"] == name), None)

    def wait_for(self, what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            try:
                value = check()
            except (httpx.HTTPStatusError, httpx.TransportError):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.3)


def operator_storage(operator_args: tuple[str, ...]) -> list[str]:
    """The storage the operator's arguments give pods (--storage-path or --storage-uri)."""
    args = list(operator_args)
    if "--storage-path" in args:
        return [Path(args[args.index("--storage-path") + 1]).as_uri()]
    if "--storage-uri" in args:
        return [args[args.index("--storage-uri") + 1]]
    return []


class Stack(ControlPlane):
    def __init__(
        self,
        workdir: Path,
        kube_env: dict[str, str],
        suffix: str = "operator",
        broker_database: int = 8,
        host: str = "127.0.0.1",
        operator_args: tuple[str, ...] = ("--default-image", "crucible-test:none"),
    ) -> None:
        """`broker_database`: the Redis database of the Celery queue; a stack running
        while the tests' stack runs needs another one. `host`: where the server listens
        and everyone reaches it (the real node's pods: the host's address on their bridge).
        """
        workdir.mkdir(parents=True, exist_ok=True)
        self.database_url = _fresh_database(suffix)
        port = free_port()
        super().__init__(f"http://{host}:{port}", ADMIN_TOKEN)
        env = {k: v for k, v in kube_env.items() if not k.startswith("CRUCIBLE_")}
        env |= {
            "CRUCIBLE_HOME": str(workdir / "home"),
            "CRUCIBLE_DATABASE_URL": self.database_url,
            "CRUCIBLE_BROKER_URL": _fresh_broker(broker_database),
            "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN,
            "CRUCIBLE_API_URL": self.url,
            "CRUCIBLE_TOKEN": ADMIN_TOKEN,
            "CRUCIBLE_DRIFT_SETTLE_SECONDS": "1",
        }
        # The roots test servers have (tests/checkpoint_files.py's among them), and where the
        # operator has pods write: the API takes checkpoints, datasets and artifacts only
        # there, and a run's checkpoints only in `<root>/runs/<id>/` (docs/storage.md).
        env |= storage_roots_env(workdir.parent, extra=operator_storage(operator_args))
        self.env = env
        self.server = Process(
            "server", ["server", "--host", host, "--port", str(port)], env, workdir / "server.log"
        )
        self.worker = Process(
            "worker", ["worker", "--concurrency", "2", "--beat"], env, workdir / "worker.log"
        )
        self.operator_metrics_port = free_port()
        self.operator = Process(
            "operator",
            [
                "operator",
                *operator_args,
                "--metrics-port",
                str(self.operator_metrics_port),
            ],
            env,
            workdir / "operator.log",
        )

    def start(self, operator: bool = True) -> None:
        """Server, worker and (unless `operator` is False: a benchmark starts it per
        measurement) the operator."""
        self.server.start()
        assert self.server.process is not None
        wait_until_serving(
            f"{self.url}/readyz", self.server.process, self.server.log, 60, what="crucible server"
        )
        self.worker.start()
        if operator:
            self.operator.start()

    def stop(self) -> None:
        for process in (self.operator, self.worker, self.server):
            process.kill(signal.SIGTERM)
        self.http.close()

    def logs(self) -> str:
        return "\n".join(p.tail() for p in (self.operator, self.worker, self.server))

    def redeliver(self, topic: str) -> None:
        """Publish the handler message of every outbox row of `topic` again, as the relay
        does with one it presumes lost."""
        engine = create_engine(self.database_url)
        with engine.connect() as connection:
            ids = connection.scalars(select(OutboxMessage.id).where(OutboxMessage.topic == topic))
            settings = load_settings(
                broker_url=self.env["CRUCIBLE_BROKER_URL"], database_url=self.database_url
            )
            app = create_celery(settings)
            for message_id in ids:
                app.send_task(HANDLE_TASK, args=[message_id], headers={"topic": topic})
            app.close()
        engine.dispose()

    def wait_until_delivered(self) -> None:
        """Wait until nothing is left to deliver: every outbox row handled and no copy of a
        handler message in Redis, queued or taken. Each unhandled row may need its next
        republish, so the deadline moves with the relay's schedule."""
        first_wait = timedelta(
            seconds=Settings.model_fields["relay_republish_after_seconds"].default
        )
        engine = create_engine(self.database_url)
        unhandled = select(OutboxMessage.sent_at, OutboxMessage.publish_attempts).where(
            OutboxMessage.handled_at.is_(None)
        )
        started = datetime.now(UTC)
        try:
            with redis.Redis.from_url(self.env["CRUCIBLE_BROKER_URL"]) as broker:
                while True:
                    with engine.connect() as connection:
                        left = list(connection.execute(unhandled))
                    copies = handler_copies(broker)
                    if not left and not copies:
                        return
                    due = [sent + republish_wait(first_wait, n) for sent, n in left if sent]
                    if datetime.now(UTC) > max([started, *due]) + timedelta(seconds=60):
                        raise AssertionError(
                            f"still to deliver: {len(left)} outbox rows, copies {copies}\n"
                            + self.logs()
                        )
                    time.sleep(0.3)
        finally:
            engine.dispose()

    def operator_calls(self) -> dict[str, float]:
        """The operator's control-plane calls so far, by client method (its metrics)."""
        text = httpx.get(f"http://127.0.0.1:{self.operator_metrics_port}/metrics").text
        return {
            sample.labels["call"]: sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "crucible_operator_control_plane_calls"
            for sample in family.samples
            if sample.name.endswith("_total")
        }
