"""The MLflow routes against the real app, on SQLite and Postgres: MLflow's error shape and
statuses, its limits (a rejected batch writes nothing), tokens as the MLflow client sends
them, and nothing of another project visible or writable."""

import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_project, make_token, postgres_only, submit
from tests.servers import app_in_thread

API = "/mlflow/api/2.0/mlflow"
ARTIFACTS = "/mlflow/api/2.0/mlflow-artifacts/artifacts"


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


@pytest.fixture
def tokens(admin: TestClient) -> dict[str, str]:
    make_project(admin, "vision")
    make_project(admin, "audio")
    return {
        "vision": make_token(admin, "vision", "editor"),
        "vision-viewer": make_token(admin, "vision", "viewer"),
        "audio": make_token(admin, "audio", "editor"),
    }


def call(client: TestClient, token: str, method: str, path: str, **kwargs: Any) -> Any:
    return client.request(method, f"{API}{path}", headers=bearer(token), **kwargs)


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == code, body
    message: str = body["message"]
    return message


def new_run(client: TestClient, token: str, experiment: str = "exp") -> str:
    experiment_id = ok(
        call(client, token, "POST", "/experiments/create", json={"name": experiment})
    )
    created = ok(
        call(
            client,
            token,
            "POST",
            "/runs/create",
            json={"experiment_id": experiment_id["experiment_id"], "run_name": "r"},
        )
    )
    run_id: str = created["run"]["info"]["run_id"]
    return run_id


def test_bearer_and_basic_auth_and_their_absence(
    client: TestClient, tokens: dict[str, str]
) -> None:
    ok(call(client, tokens["vision"], "POST", "/experiments/create", json={"name": "a"}))
    by_basic = client.get(
        f"{API}/experiments/get-by-name",
        params={"experiment_name": "a"},
        headers=basic("vision", tokens["vision"]),
    )
    assert ok(by_basic)["experiment"]["name"] == "a"
    message = error(
        client.get(f"{API}/experiments/get", params={"experiment_id": "1"}), 401, "UNAUTHENTICATED"
    )
    assert "MLFLOW_TRACKING_TOKEN" in message
    wrong = client.get(
        f"{API}/experiments/get", params={"experiment_id": "1"}, headers=bearer("cru_nope")
    )
    error(wrong, 401, "UNAUTHENTICATED")
    # A project token named for another project in basic auth sees nothing of it.
    error(
        client.get(
            f"{API}/experiments/get-by-name",
            params={"experiment_name": "a"},
            headers=basic("audio", tokens["vision"]),
        ),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )


def test_nothing_of_another_project_is_visible_or_writable(
    client: TestClient, tokens: dict[str, str]
) -> None:
    run_id = new_run(client, tokens["vision"])
    audio = tokens["audio"]
    error(
        call(client, audio, "GET", "/runs/get", params={"run_id": run_id}),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )
    error(
        call(client, audio, "GET", "/experiments/get", params={"experiment_id": "1"}),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )
    batch = {"run_id": run_id, "params": [{"key": "lr", "value": "1"}]}
    error(
        call(client, audio, "POST", "/runs/log-batch", json=batch), 404, "RESOURCE_DOES_NOT_EXIST"
    )
    upload = client.put(
        f"{ARTIFACTS}/1/{run_id}/artifacts/x.txt", content=b"x", headers=bearer(audio)
    )
    error(upload, 404, "RESOURCE_DOES_NOT_EXIST")
    assert ok(call(client, audio, "POST", "/experiments/search", json={}))["experiments"] == []
    searched = call(client, audio, "POST", "/runs/search", json={"experiment_ids": ["1"]})
    error(searched, 404, "RESOURCE_DOES_NOT_EXIST")
    viewer = call(client, tokens["vision-viewer"], "POST", "/runs/log-batch", json=batch)
    assert "editor" in error(viewer, 403, "PERMISSION_DENIED")


def test_log_batch_limits_and_a_rejected_batch_writes_nothing(
    client: TestClient, tokens: dict[str, str]
) -> None:
    token = tokens["vision"]
    run_id = new_run(client, token)
    metric = {"key": "loss", "value": 1.0, "timestamp": 1_760_000_000_000}
    too_many = [{**metric, "step": step} for step in range(1001)]
    message = error(
        call(
            client, token, "POST", "/runs/log-batch", json={"run_id": run_id, "metrics": too_many}
        ),
        400,
        "INVALID_PARAMETER_VALUE",
    )
    assert "at most 1000 metrics" in message and "1001" in message
    params = [{"key": f"p{i}", "value": "v"} for i in range(101)]
    message = error(
        call(client, token, "POST", "/runs/log-batch", json={"run_id": run_id, "params": params}),
        400,
        "INVALID_PARAMETER_VALUE",
    )
    assert "at most 100 params" in message
    long_value = call(
        client,
        token,
        "POST",
        "/runs/log-parameter",
        json={"run_id": run_id, "key": "k", "value": "x" * 6001},
    )
    assert "6001" in error(long_value, 400, "INVALID_PARAMETER_VALUE")
    mixed = {
        "run_id": run_id,
        "params": [{"key": "lr", "value": "0.1"}],
        "tags": [{"key": "team", "value": "a"}],
        "metrics": [{**metric, "step": 0}, {**metric, "value": "NaN", "step": 1}],
    }
    assert "loss" in error(
        call(client, token, "POST", "/runs/log-batch", json=mixed), 400, "INVALID_PARAMETER_VALUE"
    )
    data = ok(call(client, token, "GET", "/runs/get", params={"run_id": run_id}))["run"]["data"]
    assert data["params"] == [] and data["metrics"] == []
    assert [t["key"] for t in data["tags"]] == ["mlflow.runName"]


def test_params_are_immutable(client: TestClient, tokens: dict[str, str]) -> None:
    token = tokens["vision"]
    run_id = new_run(client, token)
    first = {"run_id": run_id, "key": "lr", "value": "0.1"}
    ok(call(client, token, "POST", "/runs/log-parameter", json=first))
    ok(call(client, token, "POST", "/runs/log-parameter", json=first))  # the same again is fine
    changed = call(client, token, "POST", "/runs/log-parameter", json={**first, "value": "0.2"})
    message = error(changed, 400, "INVALID_PARAMETER_VALUE")
    assert "'0.1'" in message and "'0.2'" in message


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("metrics.loss < 'low'", "'low'"),
        ("params.lr > '1'", "'>'"),
        ("metrics.loss < 1 or params.a = 'b'", "'or'"),
        ("colour.red = 'x'", "'colour'"),
        ("params.a = 'unterminated", "position"),
    ],
)
def test_bad_filters_name_the_offending_token(
    client: TestClient, tokens: dict[str, str], bad: str, named: str
) -> None:
    token = tokens["vision"]
    new_run(client, token)
    response = call(
        client, token, "POST", "/runs/search", json={"experiment_ids": ["1"], "filter": bad}
    )
    assert named in error(response, 400, "INVALID_PARAMETER_VALUE")


def test_search_filters_and_orders_by_metrics_params_tags(
    client: TestClient, tokens: dict[str, str]
) -> None:
    token = tokens["vision"]
    experiment = ok(call(client, token, "POST", "/experiments/create", json={"name": "grid"}))
    ids = []
    for lr, loss in (("0.1", 0.9), ("0.01", 0.3), ("0.001", 0.5)):
        created = ok(
            call(
                client,
                token,
                "POST",
                "/runs/create",
                json={"experiment_id": experiment["experiment_id"]},
            )
        )
        run_id = created["run"]["info"]["run_id"]
        ids.append(run_id)
        batch = {
            "run_id": run_id,
            "params": [{"key": "lr", "value": lr}],
            "tags": [{"key": "sweep", "value": "yes"}],
            "metrics": [{"key": "loss", "value": loss, "timestamp": 1_760_000_000_000, "step": 3}],
        }
        ok(call(client, token, "POST", "/runs/log-batch", json=batch))
    found = ok(
        call(
            client,
            token,
            "POST",
            "/runs/search",
            json={
                "experiment_ids": [experiment["experiment_id"]],
                "filter": "metrics.loss < 0.6 AND tags.sweep = 'yes' AND params.lr LIKE '0.0%'",
                "order_by": ["metrics.loss DESC"],
            },
        )
    )
    assert [r["info"]["run_id"] for r in found["runs"]] == [ids[2], ids[1]]


def test_unknown_ids_endpoints_and_duplicate_experiments(
    client: TestClient, tokens: dict[str, str]
) -> None:
    token = tokens["vision"]
    assert "999" in error(
        call(client, token, "GET", "/runs/get", params={"run_id": "999"}),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )
    error(
        call(client, token, "GET", "/runs/get", params={"run_id": "abc"}),
        404,
        "RESOURCE_DOES_NOT_EXIST",
    )
    error(
        call(client, token, "GET", "/registered-models/get", params={"name": "m"}),
        404,
        "ENDPOINT_NOT_FOUND",
    )
    ok(call(client, token, "POST", "/experiments/create", json={"name": "dup"}))
    again = call(client, token, "POST", "/experiments/create", json={"name": "dup"})
    assert "dup" in error(again, 400, "RESOURCE_ALREADY_EXISTS")
    traversal = client.get(ARTIFACTS, params={"path": "1/../2"}, headers=bearer(token))
    assert ".." in error(traversal, 400, "INVALID_PARAMETER_VALUE")


def test_experiment_lifecycle_and_the_default_experiment(
    client: TestClient, tokens: dict[str, str]
) -> None:
    token = tokens["vision"]
    # MLflow's experiment 0 is made by the first run logged to it, never by a read.
    before = call(client, token, "GET", "/experiments/get", params={"experiment_id": "0"})
    error(before, 404, "RESOURCE_DOES_NOT_EXIST")
    created = ok(call(client, token, "POST", "/runs/create", json={"experiment_id": "0"}))
    default = ok(call(client, token, "GET", "/experiments/get", params={"experiment_id": "0"}))
    assert default["experiment"]["name"] == "Default"
    assert created["run"]["info"]["experiment_id"] == default["experiment"]["experiment_id"]
    experiment_id = ok(call(client, token, "POST", "/experiments/create", json={"name": "gone"}))[
        "experiment_id"
    ]
    ok(call(client, token, "POST", "/experiments/delete", json={"experiment_id": experiment_id}))
    got = ok(
        call(client, token, "GET", "/experiments/get", params={"experiment_id": experiment_id})
    )
    assert got["experiment"]["lifecycle_stage"] == "deleted"
    active = ok(call(client, token, "POST", "/experiments/search", json={}))["experiments"]
    assert "gone" not in [e["name"] for e in active]
    refused = call(client, token, "POST", "/runs/create", json={"experiment_id": experiment_id})
    error(refused, 400, "INVALID_STATE")
    ok(call(client, token, "POST", "/experiments/restore", json={"experiment_id": experiment_id}))
    ok(call(client, token, "POST", "/runs/create", json={"experiment_id": experiment_id}))


def test_a_run_crucible_started_is_the_same_run_to_mlflow(
    app: FastAPI, admin: TestClient, client: TestClient, tokens: dict[str, str]
) -> None:
    run = submit(admin, project="vision", name="sft-1")
    token, run_id = tokens["vision"], str(run["id"])
    batch = {
        "run_id": run_id,
        "metrics": [{"key": "loss", "value": 0.5, "timestamp": 1_760_000_000_000, "step": 7}],
        "params": [{"key": "mlflow_lr", "value": "0.1"}],
    }
    ok(call(client, token, "POST", "/runs/log-batch", json=batch))
    ended = call(
        client, token, "POST", "/runs/update", json={"run_id": run_id, "status": "FINISHED"}
    )
    assert ok(ended)["run_info"]["status"] == "RUNNING"  # the backend, not MLflow, ends it
    crucible_run = admin.get(f"/api/v1/runs/{run_id}").json()
    assert crucible_run["phase"] == "Pending"
    assert crucible_run["manifest"]["spec"]["config"]["mlflow_lr"] == "0.1"
    history = admin.get(f"/api/v1/runs/{run_id}/metrics").json()
    assert history["series"][0]["steps"] == [7]


def test_artifacts_round_trip_through_the_proxy(client: TestClient, tokens: dict[str, str]) -> None:
    token = tokens["vision"]
    run_id = new_run(client, token)
    root = f"1/{run_id}/artifacts"
    put = client.put(f"{ARTIFACTS}/{root}/plots/a.txt", content=b"hello", headers=bearer(token))
    ok(put)
    listed = ok(client.get(ARTIFACTS, params={"path": root}, headers=bearer(token)))
    assert listed["files"] == [{"path": "plots", "is_dir": True}]
    listed = ok(client.get(ARTIFACTS, params={"path": f"{root}/plots"}, headers=bearer(token)))
    assert listed["files"] == [{"path": "a.txt", "is_dir": False, "file_size": 5}]
    got = client.get(f"{ARTIFACTS}/{root}/plots/a.txt", headers=bearer(token))
    assert got.status_code == 200 and got.content == b"hello"
    missing = client.get(f"{ARTIFACTS}/{root}/plots/b.txt", headers=bearer(token))
    error(missing, 404, "RESOURCE_DOES_NOT_EXIST")


def test_metric_history_and_its_bulk_interval(client: TestClient, tokens: dict[str, str]) -> None:
    token = tokens["vision"]
    run_id = new_run(client, token)
    metrics = [
        {"key": "loss", "value": float(step), "timestamp": 1_760_000_000_000 + step, "step": step}
        for step in range(10)
    ]
    ok(call(client, token, "POST", "/runs/log-batch", json={"run_id": run_id, "metrics": metrics}))
    history = ok(
        call(
            client,
            token,
            "GET",
            "/metrics/get-history",
            params={"run_id": run_id, "metric_key": "loss"},
        )
    )
    assert [(m["step"], m["value"], m["timestamp"]) for m in history["metrics"]] == [
        (m["step"], m["value"], m["timestamp"]) for m in metrics
    ]
    params = {
        "run_ids": [run_id],
        "metric_key": "loss",
        "max_results": 5,
        "start_step": 2,
        "end_step": 8,
    }
    bulk = ok(call(client, token, "GET", "/metrics/get-history-bulk-interval", params=params))
    steps = [m["step"] for m in bulk["metrics"]]
    assert steps[0] == 2 and steps[-1] == 8 and len(steps) <= 5
    assert {m["run_id"] for m in bulk["metrics"]} == {run_id}
    uneven = {**params, "end_step": None}
    del uneven["end_step"]
    assert "start_step" in error(
        call(client, token, "GET", "/metrics/get-history-bulk-interval", params=uneven),
        400,
        "INVALID_PARAMETER_VALUE",
    )


@postgres_only
def test_batches_sent_at_once_to_one_run_lose_no_param_or_tag(
    app: FastAPI, tokens: dict[str, str], client: TestClient
) -> None:
    """As the Hugging Face Trainer's callback sends its params: several log-batch calls in
    flight together, each adding keys to the same run's params and tags."""
    token = tokens["vision"]
    run_id = new_run(client, token)

    def send(part: int) -> int:
        body = {
            "run_id": run_id,
            "params": [{"key": f"p{part}_{i}", "value": str(i)} for i in range(20)],
            "tags": [{"key": f"t{part}_{i}", "value": str(i)} for i in range(20)],
        }
        answer = httpx.post(f"{url}{API}/runs/log-batch", json=body, headers=bearer(token))
        return answer.status_code

    with app_in_thread(app) as url, ThreadPoolExecutor(8) as pool:
        assert list(pool.map(send, range(8))) == [200] * 8
    data = ok(call(client, token, "GET", "/runs/get", params={"run_id": run_id}))["run"]["data"]
    params = {p["key"] for p in data["params"]}
    tags = {t["key"] for t in data["tags"]}
    expected = {f"{part}_{i}" for part in range(8) for i in range(20)}
    assert {k[1:] for k in params if k[0] == "p"} == expected
    assert {k[1:] for k in tags if k[0] == "t"} == expected
