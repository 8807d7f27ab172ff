"""Metric ingestion and history, on SQLite and Postgres."""

import math
import random
import re
import threading
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.core import metrics as core_metrics
from crucible.core.access import SYSTEM
from crucible.db.engine import transaction
from crucible.schemas.metrics import MetricBatch
from tests.conftest import bearer, make_project, make_token, submit

Point = dict[str, Any]


def points(key: str, steps: range, value: Any = None) -> list[Point]:
    return [{"key": key, "step": s, "value": value(s) if value else s / 10} for s in steps]


def log(admin: TestClient, run_id: object, batch: list[Point], **headers: str) -> dict[str, Any]:
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"points": batch}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def read(admin: TestClient, run_id: object, **params: Any) -> dict[str, dict[str, Any]]:
    response = admin.get(f"/api/v1/runs/{run_id}/metrics", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["run_id"] == run_id
    return {series["key"]: series for series in body["series"]}


def ingested_counter(admin: TestClient) -> float:
    text = admin.get("/metrics").text
    match = re.search(r"^crucible_metric_points_ingested_total (\S+)$", text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


@pytest.fixture
def run_id(admin: TestClient) -> int:
    make_project(admin)
    run_id = submit(admin)["id"]
    assert isinstance(run_id, int)
    return run_id


def test_ingest_and_read_back(admin: TestClient, run_id: int) -> None:
    batch = [
        *points("train/loss", range(50), lambda s: 1 / (s + 1)),
        {"key": "eval/acc", "step": 10, "value": 0.5, "time": 1_700_000_000.25},
        {"key": "eval/acc", "step": 20, "value": 0.75, "time": 1_700_000_100.5},
    ]
    assert log(admin, run_id, batch) == {"accepted": 52, "duplicates": 0, "replayed": False}

    series = read(admin, run_id)
    assert list(series) == ["eval/acc", "train/loss"]
    acc = series["eval/acc"]
    assert acc["steps"] == [10, 20]
    assert acc["values"] == [0.5, 0.75]
    assert acc["times"] == [1_700_000_000.25, 1_700_000_100.5]
    assert (acc["total_points"], acc["downsampled"]) == (2, False)
    loss = series["train/loss"]
    assert loss["steps"] == list(range(50))
    assert loss["values"] == [1 / (s + 1) for s in range(50)]
    assert all(abs(t - loss["times"][0]) < 1 and t > 1.7e9 for t in loss["times"])

    keys = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()
    assert keys == {
        "run_id": run_id,
        "keys": [
            {"key": "eval/acc", "point_count": 2, "last_step": 20, "last_value": 0.75},
            {"key": "train/loss", "point_count": 50, "last_step": 49, "last_value": 1 / 50},
        ],
    }


def test_resending_a_batch_stores_nothing_twice(admin: TestClient, run_id: int) -> None:
    batch = points("loss", range(300)) + points("lr", range(0, 300, 3))
    before = ingested_counter(admin)
    assert log(admin, run_id, batch)["accepted"] == 400
    again = log(admin, run_id, batch)
    assert (again["accepted"], again["duplicates"]) == (0, 400)
    assert ingested_counter(admin) == before + 400

    series = read(admin, run_id)
    assert series["loss"]["steps"] == list(range(300))
    assert series["lr"]["total_points"] == 100
    keys = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"]
    assert [k["point_count"] for k in keys] == [300, 100]


def test_first_value_of_a_step_wins(admin: TestClient, run_id: int) -> None:
    batch = [{"key": "loss", "step": 7, "value": 1.0}, {"key": "loss", "step": 7, "value": 2.0}]
    assert log(admin, run_id, batch) == {"accepted": 1, "duplicates": 1, "replayed": False}
    assert log(admin, run_id, [{"key": "loss", "step": 7, "value": 3.0}])["duplicates"] == 1
    assert read(admin, run_id)["loss"]["values"] == [1.0]
    key = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"][0]
    assert (key["point_count"], key["last_step"], key["last_value"]) == (1, 7, 1.0)


def test_last_point_follows_the_highest_step(admin: TestClient, run_id: int) -> None:
    log(admin, run_id, [{"key": "loss", "step": 100, "value": 1.0}])
    log(admin, run_id, [{"key": "loss", "step": 50, "value": 9.0}])  # late, lower step
    log(
        admin,
        run_id,
        [{"key": "loss", "step": 150, "value": 0.5}, {"key": "loss", "step": 120, "value": 0.7}],
    )
    key = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"][0]
    assert (key["point_count"], key["last_step"], key["last_value"]) == (4, 150, 0.5)


def test_idempotency_key_replays_the_first_answer(admin: TestClient, run_id: int) -> None:
    batch = points("loss", range(20))
    first = log(admin, run_id, batch, **{"Idempotency-Key": "batch-1"})
    counted = ingested_counter(admin)
    replay = log(admin, run_id, batch, **{"Idempotency-Key": "batch-1"})
    # A re-insert would have answered 0 accepted / 20 duplicates.
    assert first == {"accepted": 20, "duplicates": 0, "replayed": False}
    assert replay == {"accepted": 20, "duplicates": 0, "replayed": True}
    assert ingested_counter(admin) == counted

    other = admin.post(
        f"/api/v1/runs/{run_id}/metrics",
        json={"points": points("x", range(3))},
        headers={"Idempotency-Key": "batch-1"},
    )
    assert other.status_code == 409
    assert "batch-1" in other.json()["detail"]
    assert "x" not in read(admin, run_id)


def test_more_than_10000_points_is_422_naming_points(admin: TestClient, run_id: int) -> None:
    response = admin.post(
        f"/api/v1/runs/{run_id}/metrics", json={"points": points("loss", range(10_001))}
    )
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert [e["loc"] for e in errors] == [["body", "points"]]
    assert errors[0]["type"] == "too_long"
    assert read(admin, run_id) == {}


BAD_POINTS: list[tuple[Point, str]] = [
    ({"key": "loss", "step": 1, "value": "high"}, "value"),
    ({"key": "loss", "step": 1, "value": "NaN"}, "value"),
    ({"key": "loss", "step": 1, "value": "Infinity"}, "value"),
    ({"key": "loss", "step": -1, "value": 1.0}, "step"),
    ({"key": "loss", "step": 1.5, "value": 1.0}, "step"),
    ({"key": "", "step": 1, "value": 1.0}, "key"),
    ({"key": "a,b", "step": 1, "value": 1.0}, "key"),
    ({"key": "k" * 251, "step": 1, "value": 1.0}, "key"),
    ({"key": "loss", "step": 1, "value": 1.0, "time": "yesterday"}, "time"),
    ({"key": "loss", "step": 1, "value": 1.0, "colour": "red"}, "colour"),
    ({"step": 1, "value": 1.0}, "key"),
]


def test_bad_points_are_422_with_the_field_path(admin: TestClient, run_id: int) -> None:
    for point, field in BAD_POINTS:
        batch = [{"key": "fine", "step": 0, "value": 0.0}, point]
        response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"points": batch})
        assert response.status_code == 422, point
        locs = [e["loc"] for e in response.json()["detail"]]
        assert locs == [["body", "points", 1, field]], point
    assert read(admin, run_id) == {}  # the good points were not stored either


def test_non_finite_json_literals_name_the_field(admin: TestClient, run_id: int) -> None:
    for literal in (b"NaN", b"-Infinity", b"1e400"):
        body = b'{"points": [{"key": "loss", "step": 1, "value": ' + literal + b"}]}"
        response = admin.post(
            f"/api/v1/runs/{run_id}/metrics",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, literal
        error = response.json()["detail"][0]
        assert (error["loc"], error["type"]) == (["body", "points", 0, "value"], "finite_number")


def test_max_points_keeps_the_extremes(admin: TestClient, run_id: int) -> None:
    curve = points("loss", range(1000), lambda s: math.sin(s / 50))
    curve[537]["value"] = 1e6  # a spike
    curve[211]["value"] = -1e6  # and a dip
    log(admin, run_id, curve)

    for n in (4, 5, 20, 101):
        loss = read(admin, run_id, max_points=n)["loss"]
        assert len(loss["steps"]) <= n
        assert loss["steps"] == sorted(set(loss["steps"]))
        assert {0, 211, 537, 999} <= set(loss["steps"])
        assert 1e6 in loss["values"] and -1e6 in loss["values"]
        assert len(loss["values"]) == len(loss["times"]) == len(loss["steps"])
        assert (loss["total_points"], loss["downsampled"]) == (1000, True)

    whole = read(admin, run_id, max_points=1000)["loss"]
    assert (len(whole["steps"]), whole["downsampled"]) == (1000, False)

    too_few = admin.get(f"/api/v1/runs/{run_id}/metrics", params={"max_points": 3})
    assert too_few.status_code == 422
    assert too_few.json()["detail"][0]["loc"] == ["query", "max_points"]


def test_keys_filter_and_step_range(admin: TestClient, run_id: int) -> None:
    log(admin, run_id, points("a", range(10)) + points("b", range(10)) + points("c", range(10)))
    assert list(read(admin, run_id, keys="c,a")) == ["a", "c"]
    assert list(read(admin, run_id, keys="b,missing")) == ["b"]

    ranged = read(admin, run_id, keys="a", step_min=3, step_max=6)["a"]
    assert (ranged["steps"], ranged["total_points"]) == ([3, 4, 5, 6], 4)
    assert read(admin, run_id, step_min=50) == {}

    inverted = admin.get(f"/api/v1/runs/{run_id}/metrics", params={"step_min": 7, "step_max": 2})
    assert inverted.status_code == 422
    error = inverted.json()["detail"][0]
    assert (error["loc"], error["input"]) == (["query", "step_min"], 7)
    assert "step_max" in error["msg"]


def test_latest_step_of_the_run_only_moves_forward(admin: TestClient, run_id: int) -> None:
    assert admin.get(f"/api/v1/runs/{run_id}").json()["latest_step"] is None
    log(admin, run_id, points("loss", range(0, 500, 10)))
    assert admin.get(f"/api/v1/runs/{run_id}").json()["latest_step"] == 490
    log(admin, run_id, points("eval", range(5)))
    assert admin.get(f"/api/v1/runs/{run_id}").json()["latest_step"] == 490


def test_another_projects_token_gets_404(admin: TestClient, run_id: int) -> None:
    make_project(admin, "audio")
    outsider = bearer(make_token(admin, "audio", "admin"))
    path = f"/api/v1/runs/{run_id}/metrics"
    assert admin.post(path, json={"points": []}, headers=outsider).status_code == 404
    assert admin.get(path, headers=outsider).status_code == 404
    assert admin.get(f"{path}/keys", headers=outsider).status_code == 404


def test_viewer_reads_but_cannot_log(admin: TestClient, run_id: int) -> None:
    log(admin, run_id, points("loss", range(3)))
    viewer = bearer(make_token(admin, "vision", "viewer"))
    path = f"/api/v1/runs/{run_id}/metrics"
    refused = admin.post(path, json={"points": points("loss", range(3, 6))}, headers=viewer)
    assert refused.status_code == 403
    assert "editor" in refused.json()["detail"]
    assert admin.get(path, headers=viewer).json()["series"][0]["steps"] == [0, 1, 2]
    editor = bearer(make_token(admin, "vision", "editor"))
    accepted = admin.post(path, json={"points": points("loss", range(3, 6))}, headers=editor)
    assert accepted.json()["accepted"] == 3


def test_unknown_run_is_404(admin: TestClient, run_id: int) -> None:
    response = admin.post("/api/v1/runs/999999/metrics", json={"points": points("x", range(2))})
    assert response.status_code == 404


# --- Postgres only --------------------------------------------------------------------------

postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@postgres_only
def test_large_series_is_downsampled_in_sql(
    admin: TestClient, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 120_000
    rng = random.Random(7)
    values = [rng.uniform(-1, 1) for _ in range(n)]
    values[77_777], values[3_333] = 50.0, -50.0
    for start in range(0, n, 10_000):
        batch = [
            {"key": "loss", "step": s, "value": values[s]} for s in range(start, start + 10_000)
        ]
        assert log(admin, run_id, batch)["accepted"] == 10_000

    calls: list[int] = []
    in_sql = core_metrics._downsample_postgres

    def spy(*args: Any) -> Any:
        calls.append(1)
        return in_sql(*args)

    monkeypatch.setattr(core_metrics, "_downsample_postgres", spy)
    for budget in (4, 500, 2_000):
        loss = read(admin, run_id, max_points=budget)["loss"]
        assert len(loss["steps"]) <= budget
        assert loss["steps"] == sorted(set(loss["steps"]))
        assert {0, 3_333, 77_777, n - 1} <= set(loss["steps"])
        assert loss["values"] == [values[s] for s in loss["steps"]]
        assert (loss["total_points"], loss["downsampled"]) == (n, True)
    assert len(calls) == 3

    # A step range inside the big series: cut when it is larger than the budget...
    ranged = read(admin, run_id, max_points=100, step_min=70_000, step_max=80_000)["loss"]
    assert ranged["steps"][0] == 70_000 and ranged["steps"][-1] == 80_000
    assert 77_777 in ranged["steps"] and len(ranged["steps"]) <= 100
    assert ranged["total_points"] == 10_001
    # ...and whole when it fits.
    small = read(admin, run_id, max_points=100, step_min=500, step_max=549)["loss"]
    assert (small["steps"], small["downsampled"]) == (list(range(500, 550)), False)

    # The Python path keeps the same essentials.
    monkeypatch.setattr(core_metrics, "SQL_DOWNSAMPLE_MIN_POINTS", n + 1)
    in_python = read(admin, run_id, max_points=500)["loss"]
    assert len(calls) == 5
    assert len(in_python["steps"]) <= 500
    assert {0, 3_333, 77_777, n - 1} <= set(in_python["steps"])


@postgres_only
def test_concurrent_overlapping_batches_neither_deadlock_nor_duplicate(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    """The same points sent in different orders at once (a client retrying while the first
    try is still running) must all end up stored once, whichever request stores them."""
    batch = points("loss", range(3_000)) + points("lr", range(3_000))
    results: list[int] = []
    errors: list[BaseException] = []

    def send(seed: int) -> None:
        shuffled = batch[:]
        random.Random(seed).shuffle(shuffled)
        try:
            with transaction(app.state.session_factory) as session:
                result = core_metrics.ingest(
                    session=session,
                    principal=SYSTEM,
                    run_id=run_id,
                    batch=MetricBatch.model_validate({"points": shuffled}),
                )
            results.append(result.accepted)
        except BaseException as exc:  # reported below, from the main thread
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(results) == 6_000
    keys = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"]
    assert [(k["point_count"], k["last_step"]) for k in keys] == [(3_000, 2_999), (3_000, 2_999)]
