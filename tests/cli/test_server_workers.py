"""`crucible server --workers N` as the Helm chart runs it: N API processes under uvicorn's
supervisor on Postgres, with the health-check timeout a loaded machine needs."""

import os
from pathlib import Path

import httpx
import pytest

from tests.servers import crucible, free_port, local_server

ADMIN = "cru_workers-test-admin"


def _children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]


@pytest.mark.postgres
def test_two_api_processes_serve_one_database(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database_url: str = request.getfixturevalue("_postgres_at_head")
    with local_server(
        tmp_path,
        args=("--workers", "2", "--worker-healthcheck-timeout", "20"),
        env={"CRUCIBLE_DATABASE_URL": database_url, "CRUCIBLE_ADMIN_TOKEN": ADMIN},
    ) as server:
        assert len(_children(server.pid)) >= 2, server.log.read_text()
        headers = {"Authorization": f"Bearer {ADMIN}"}
        # Connections spread over both processes; every one answers from the same database.
        for _ in range(20):
            with httpx.Client(base_url=server.url, headers=headers) as client:
                assert client.get("/api/v1/projects").status_code == 200
        assert "with 2 workers" in server.log.read_text()


def test_workers_on_the_embedded_database_are_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env["CRUCIBLE_HOME"] = str(tmp_path / "home")
    result = crucible(env, "server", "--port", str(free_port()), "--workers", "2")
    assert result.returncode == 1
    assert "--workers 2 needs Postgres" in result.stderr


def test_a_health_check_timeout_below_one_second_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env["CRUCIBLE_HOME"] = str(tmp_path / "home")
    result = crucible(env, "server", "--workers", "2", "--worker-healthcheck-timeout", "0")
    assert result.returncode == 2
    assert "--worker-healthcheck-timeout" in result.stderr
    assert not (tmp_path / "home").exists()
