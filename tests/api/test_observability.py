"""Health, readiness, Prometheus metrics and request limits."""

from fastapi.testclient import TestClient

from tests.conftest import make_project, submit


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ok"


def test_prometheus_metrics_use_route_templates_and_count_runs(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    admin.get(f"/api/v1/runs/{run_id}")
    text = admin.get("/metrics").text
    assert 'route="/api/v1/runs/{run_id}"' in text
    assert f'route="/api/v1/runs/{run_id}"' not in text
    assert 'crucible_runs{phase="Pending"} 1.0' in text
    assert "crucible_db_pool_connections_in_use" in text


def test_oversized_body_is_413(admin: TestClient) -> None:
    limit = admin.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    response = admin.post(
        "/api/v1/projects", content=b"x" * (limit + 1), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert str(limit) in response.json()["detail"]


def test_openapi_has_stable_operation_ids(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    ids = [op["operationId"] for path in schema["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
    assert {"submitRun", "listRuns", "getRun", "createProject", "createToken"} <= set(ids)
