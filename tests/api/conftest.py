"""A private Postgres and real `crucible server` processes for fault injection.

The chaos tests restart Postgres, so they never touch the shared one of scripts/services
(other suites use it at the same time): each session starts its own in a fresh services
directory on a free port, through the same script, and takes it down afterwards.
"""

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from crucible.db import schema
from tests.conftest import ADMIN_TOKEN
from tests.servers import free_port, wait_until_serving

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "scripts" / "services"


@dataclass(frozen=True)
class PrivatePostgres:
    env: dict[str, str]  # CRUCIBLE_SERVICES_DIR and the ports, for every scripts/services call
    admin_url: str  # the `crucible` database, used only to create the others

    def services(self, *args: str) -> None:
        done = subprocess.run(
            [str(SERVICES), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"scripts/services {' '.join(args)} failed:\n{done.stderr}"

    def restart(self, mode: str) -> None:
        self.services("restart-postgres", mode)

    def fresh_database(self) -> str:
        """A new, empty database at the schema's head; its URL."""
        name = f"chaos_{uuid.uuid4().hex[:12]}"
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        url = make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)
        migrated = create_engine(url)
        schema.upgrade(migrated)
        migrated.dispose()
        return url


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    # Short and world-searchable: the postgres user must reach it, and the socket path in it
    # must stay under 100 characters.
    directory = f"/tmp/crucible-chaos-{uuid.uuid4().hex[:8]}"
    env = os.environ | {
        "CRUCIBLE_SERVICES_DIR": directory,
        "CRUCIBLE_PG_PORT": str(free_port()),
        "CRUCIBLE_REDIS_PORT": str(free_port()),
    }
    started = subprocess.run(
        [str(SERVICES), "up", "postgres-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    postgres = None
    try:
        assert started.returncode == 0, f"private Postgres did not start:\n{started.stderr}"
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
        )
        postgres = PrivatePostgres(env=env, admin_url=exports["CRUCIBLE_DATABASE_URL"])
        yield postgres
    finally:
        subprocess.run([str(SERVICES), "down"], env=env, capture_output=True, timeout=180)


class ApiProcess:
    """`crucible server` on a given database and port, that can be SIGKILLed and restarted."""

    def __init__(self, database_url: str, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "server.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        self.env |= {
            "CRUCIBLE_HOME": str(workdir / "home"),
            "CRUCIBLE_DATABASE_URL": database_url,
            "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "crucible", "server", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        # Imports alone take 15 s on a busy 2-core machine.
        wait_until_serving(
            f"{self.url}/readyz", self._process, self.log, 120, what="crucible server"
        )

    def kill(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(30)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)


@pytest.fixture
def api_process(private_postgres: PrivatePostgres, tmp_path: Path) -> Iterator[ApiProcess]:
    process = ApiProcess(private_postgres.fresh_database(), tmp_path)
    process.start()
    yield process
    process.stop()
