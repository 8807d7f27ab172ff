"""Event streams and tenancy, live: a project-A token following its experiment over SSE sees
A's new events and none of project B's, which happen at the same time; B's streams refuse it.

The stream never ends by itself, so the app is served by a real uvicorn on a thread (an
in-process transport would wait for the end of the body).
"""

import threading
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_project, make_token, training_run
from tests.servers import app_in_thread


@pytest.fixture
def served(app: FastAPI) -> Iterator[str]:
    with app_in_thread(app) as url:
        yield url


def run_in(admin: TestClient, project: str, name: str) -> dict[str, int]:
    manifest = training_run(name=name, experiment=f"{project}-exp")
    response = admin.post("/api/v1/runs", json={"project": project, "manifest": manifest})
    assert response.status_code == 201, response.text
    body: dict[str, int] = response.json()
    return body


def test_a_stream_of_project_a_carries_none_of_project_b(admin: TestClient, served: str) -> None:
    make_project(admin, "alpha")
    make_project(admin, "zzbeta")
    a_run = run_in(admin, "alpha", "a-run")
    b_run = run_in(admin, "zzbeta", "zzbeta-run")
    alpha = bearer(make_token(admin, "alpha", "viewer"))
    with httpx.Client(base_url=served, headers=alpha, timeout=30) as client:
        for path in (
            f"/api/v1/runs/{b_run['id']}/events/stream",
            f"/api/v1/experiments/{b_run['experiment_id']}/events/stream",
        ):
            assert client.get(path).status_code == 404

    received: list[str] = []

    def follow() -> None:
        path = f"{served}/api/v1/experiments/{a_run['experiment_id']}/events/stream"
        timeout = httpx.Timeout(30, read=60)
        with httpx.stream("GET", path, headers=alpha, timeout=timeout) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    received.append(line)
                    if "cancelled by user" in line:
                        return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    run_in(admin, "zzbeta", "zzbeta-second")
    assert admin.post(f"/api/v1/runs/{b_run['id']}/cancel").status_code == 200
    assert admin.post(f"/api/v1/runs/{a_run['id']}/cancel").status_code == 200
    follower.join(90)
    assert not follower.is_alive(), f"A's cancel never arrived; got {received}"
    assert any("cancelled by user" in line for line in received)
    assert all(f'"run_id":{a_run["id"]}' in line for line in received), received
    assert not any("zzbeta" in line for line in received)
