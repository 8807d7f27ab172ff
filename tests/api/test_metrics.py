"""Metric ingestion and history, on SQLite and Postgres."""

import math
import random
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from crucible.api.app import create_app
from crucible.core import metrics as core_metrics
from crucible.core import projects as core_projects
from crucible.core.access import SYSTEM
from crucible.db import schema
from crucible.db.engine import transaction
from crucible.db.tables import MetricPoint, MetricRollup, MetricSeries
from crucible.domain.downsample import (
    ROLLUP_LEVELS,
    Rollup,
    minmax_rollup_points,
    rollup_level,
    rollups_by_bucket,
)
from crucible.schemas.metrics import MetricBatch
from crucible.settings import load_settings
from tests.conftest import (
    ADMIN_TOKEN,
    bearer,
    make_project,
    make_token,
    postgres_url,
    submit,
    training_run,
)

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


def test_rows_store_the_same_points_as_single_points(admin: TestClient, run_id: int) -> None:
    rows = [
        {"step": 0, "values": {"loss": 2.0, "lr": 0.1}, "time": 1_700_000_000.5},
        {"step": 1, "values": {"loss": 1.5}},
    ]
    body = {"points": [{"key": "loss", "step": 0, "value": 9.0}], "rows": rows}
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json=body)
    assert response.status_code == 200, response.text
    # The point for (loss, 0) comes first in the batch, so it wins over the row's value.
    assert response.json() == {"accepted": 3, "duplicates": 1, "replayed": False}
    series = read(admin, run_id)
    assert (series["loss"]["steps"], series["loss"]["values"]) == ([0, 1], [9.0, 1.5])
    assert (series["lr"]["values"], series["lr"]["times"]) == ([0.1], [1_700_000_000.5])
    assert series["loss"]["times"][1] > 1.7e9  # no time: when the server received it


def test_rows_past_10000_points_in_all_are_422_naming_the_count(
    admin: TestClient, run_id: int
) -> None:
    rows = [{"step": s, "values": {f"m{k}": 0.0 for k in range(100)}} for s in range(100)]
    body = {"points": [{"key": "loss", "step": 0, "value": 0.0}], "rows": rows}
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json=body)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert "holds 10001 points; at most 10000" in error["msg"]
    assert read(admin, run_id) == {}


def test_bad_rows_are_422_with_the_field_path(admin: TestClient, run_id: int) -> None:
    bad_rows = [
        ({"step": 1, "values": {"loss": "high"}}, ["values", "loss"]),
        ({"step": 1, "values": {"a,b": 1.0}}, ["values", "a,b", "[key]"]),
        ({"step": -1, "values": {"loss": 1.0}}, ["step"]),
        ({"step": 1, "values": {"loss": 1.0}, "colour": "red"}, ["colour"]),
    ]
    for row, where in bad_rows:
        body = {"rows": [{"step": 0, "values": {"fine": 0.0}}, row]}
        response = admin.post(f"/api/v1/runs/{run_id}/metrics", json=body)
        assert response.status_code == 422, row
        locs = [e["loc"] for e in response.json()["detail"]]
        assert locs == [["body", "rows", 1, *where]], (row, locs)
    body = b'{"rows": [{"step": 1, "values": {"loss": NaN}}]}'
    response = admin.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "finite_number"
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
def test_large_series_is_downsampled_without_reading_it(
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

    served: dict[str, int] = {"rollups": 0, "sql": 0}
    from_rollups, in_sql = core_metrics._downsample_rollups, core_metrics._downsample_postgres

    def spy_rollups(*args: Any) -> Any:
        result = from_rollups(*args)
        served["rollups"] += result is not None
        return result

    def spy_sql(*args: Any) -> Any:
        served["sql"] += 1
        return in_sql(*args)

    monkeypatch.setattr(core_metrics, "_downsample_rollups", spy_rollups)
    monkeypatch.setattr(core_metrics, "_downsample_postgres", spy_sql)

    def check(loss: dict[str, Any], budget: int) -> None:
        assert len(loss["steps"]) <= budget
        assert loss["steps"] == sorted(set(loss["steps"]))
        assert {0, 3_333, 77_777, n - 1} <= set(loss["steps"])
        assert loss["values"] == [values[s] for s in loss["steps"]]
        assert len(loss["times"]) == len(loss["steps"])
        assert (loss["total_points"], loss["downsampled"]) == (n, True)

    for budget in (4, 500, 2_000):
        check(read(admin, run_id, max_points=budget)["loss"], budget)
    assert served == {"rollups": 3, "sql": 0}

    # A step range inside the big series: cut when it is larger than the budget...
    ranged = read(admin, run_id, max_points=100, step_min=70_000, step_max=80_000)["loss"]
    assert ranged["steps"][0] == 70_000 and ranged["steps"][-1] == 80_000
    assert 77_777 in ranged["steps"] and len(ranged["steps"]) <= 100
    assert ranged["total_points"] == 10_001
    assert ranged["values"] == [values[s] for s in ranged["steps"]]
    assert served == {"rollups": 4, "sql": 0}
    # ...and whole when it fits (too few whole buckets for rollups: the SQL path finds it fits).
    small = read(admin, run_id, max_points=100, step_min=500, step_max=549)["loss"]
    assert (small["steps"], small["downsampled"]) == (list(range(500, 550)), False)
    assert served == {"rollups": 4, "sql": 1}

    # Finer than the finest rollups (64 steps a bucket) can serve: buckets in SQL.
    check(read(admin, run_id, max_points=10_000)["loss"], 10_000)
    assert served == {"rollups": 4, "sql": 2}

    # The Python path keeps the same essentials.
    monkeypatch.setattr(core_metrics, "SQL_DOWNSAMPLE_MIN_POINTS", n + 1)
    check(read(admin, run_id, max_points=6_000)["loss"], 6_000)
    assert served == {"rollups": 4, "sql": 2}


@postgres_only
def test_concurrent_overlapping_batches_neither_deadlock_nor_duplicate(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    """The same points sent in different orders at once (a client retrying while the first
    try is still running) must all end up stored once, whichever request stores them: the
    batches of only new steps are COPYed, the others (here: with a point stored before)
    INSERTed, and the two can meet on the same new points."""
    log(admin, run_id, points("loss", range(1)))
    batch = points("loss", range(1, 3_000)) + points("lr", range(1, 3_000))
    results: list[int] = []
    errors: list[BaseException] = []

    def send(seed: int) -> None:
        shuffled = batch[:] + (points("loss", range(1)) if seed % 2 else [])
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

    threads = [threading.Thread(target=send, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(results) == 5_998
    keys = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"]
    assert [(k["point_count"], k["last_step"]) for k in keys] == [(3_000, 2_999), (2_999, 2_999)]
    stored_points, rollups = stored(app.state.session_factory, run_id)
    assert rollups == reference_rollups(stored_points)


# --- rollups --------------------------------------------------------------------------------

StoredPoints = dict[str, list[tuple[int, float, float]]]
StoredRollups = dict[str, dict[tuple[int, int], Rollup]]


def stored(factory: sessionmaker[Session], run_id: int) -> tuple[StoredPoints, StoredRollups]:
    """The run's points by key (step order), and its rollups by key and (level, bucket)."""
    with transaction(factory) as session:
        keys = dict(
            session.execute(
                select(MetricSeries.id, MetricSeries.key).where(MetricSeries.run_id == run_id)
            ).all()
        )
        point_rows = session.execute(
            select(
                MetricPoint.series_id, MetricPoint.step, MetricPoint.value, MetricPoint.wall_time
            )
            .where(MetricPoint.series_id.in_(keys))
            .order_by(MetricPoint.series_id, MetricPoint.step)
        ).all()
        fields = [getattr(MetricRollup, field) for field in Rollup._fields]
        rollup_rows = session.execute(
            select(MetricRollup.series_id, MetricRollup.level, MetricRollup.bucket, *fields).where(
                MetricRollup.series_id.in_(keys)
            )
        ).all()
    points: StoredPoints = {}
    for series_id, *point in point_rows:
        points.setdefault(keys[series_id], []).append((point[0], point[1], point[2]))
    rollups: StoredRollups = {}
    for series_id, level, bucket, *summary in rollup_rows:
        rollups.setdefault(keys[series_id], {})[(level, bucket)] = Rollup(*summary)
    return points, rollups


def reference_rollups(points: StoredPoints) -> StoredRollups:
    """What the rollups must be: the points bucketed at every level, from scratch."""
    return {
        key: {
            (level, bucket): rollup
            for level in ROLLUP_LEVELS
            for bucket, rollup in rollups_by_bucket(series, level).items()
        }
        for key, series in points.items()
    }


def test_rollups_summarise_exactly_the_stored_points(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    """Whatever the order and overlap of batches: out-of-order steps, repeats inside a batch,
    re-sent batches (which must change nothing), ties between values, sparse steps."""
    factory = app.state.session_factory
    rng = random.Random(11)

    def value(_: int) -> float:
        return float(rng.randint(-3, 3))  # few values: many ties for lowest and highest

    forward = points("loss", range(5_000, 8_000), value) + points("acc", range(5_000, 8_000, 7))
    backward = points("loss", range(4_999, -1, -1), value)
    sparse = points("loss", range(8_000, 300_000, 997), value)
    rng.shuffle(sparse)
    repeated = [{"key": "loss", "step": 400_000, "value": 1.0}] * 2 + [
        {"key": "loss", "step": 400_001, "value": -1.0}
    ]
    overlapping = points("loss", range(7_500, 8_500), value) + points("acc", range(0, 9_000, 5))
    rng.shuffle(overlapping)

    for batch in (forward, backward, sparse, repeated, overlapping):
        log(admin, run_id, batch)
        stored_points, rollups = stored(factory, run_id)
        assert rollups == reference_rollups(stored_points)

    before = stored(factory, run_id)
    for batch in (forward, backward, repeated, overlapping):
        assert log(admin, run_id, batch)["accepted"] == 0
    assert stored(factory, run_id) == before

    loss = before[0]["loss"]
    assert (loss[-2][1], loss[-1][1]) == (1.0, -1.0)  # the first of a repeated step won
    keys = admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"]
    assert [(k["key"], k["point_count"]) for k in keys] == [
        ("acc", len(before[0]["acc"])),
        ("loss", len(loss)),
    ]


def test_downsampled_reads_from_rollups_equal_reducing_the_points(
    app: FastAPI, admin: TestClient, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 30_000
    rng = random.Random(5)
    values = {s: rng.gauss(0, 1) for s in range(n)}
    values[12_345], values[23_456] = 40.0, -40.0
    steps = list(values)
    rng.shuffle(steps)  # out of order, across batches
    for start in range(0, n, 10_000):
        batch = [
            {"key": "loss", "step": s, "value": values[s]} for s in steps[start : start + 10_000]
        ]
        log(admin, run_id, batch)
    series = stored(app.state.session_factory, run_id)[0]["loss"]

    served = []
    from_rollups = core_metrics._downsample_rollups

    def spy(*args: Any) -> Any:
        result = from_rollups(*args)
        served.append(result is not None)
        return result

    monkeypatch.setattr(core_metrics, "_downsample_rollups", spy)
    for budget in (4, 5, 60, 401, 900):
        loss = read(admin, run_id, max_points=budget)["loss"]
        by_level = {level: rollups_by_bucket(series, level) for level in ROLLUP_LEVELS}
        level = rollup_level({lv: len(rollups) for lv, rollups in by_level.items()}, budget)
        assert level is not None
        expected = minmax_rollup_points(list(by_level[level].values()), budget)
        assert list(zip(loss["steps"], loss["values"], loss["times"], strict=True)) == expected
        assert len(loss["steps"]) <= budget
        assert {0, 12_345, 23_456, n - 1} <= set(loss["steps"])
        assert (loss["total_points"], loss["downsampled"]) == (n, True)

    # Step ranges: whole buckets where they fit, the ragged ends from finer ones or points.
    for low, high, budget in ((1, 29_998, 300), (12_000, 12_999, 20), (100, 23_456, 500)):
        loss = read(admin, run_id, max_points=budget, step_min=low, step_max=high)["loss"]
        inside = [p for p in series if low <= p[0] <= high]
        kept = list(zip(loss["steps"], loss["values"], loss["times"], strict=True))
        assert set(kept) <= set(inside)
        assert kept == sorted(kept) and len(kept) <= budget
        assert (kept[0], kept[-1]) == (inside[0], inside[-1])
        assert min(p[1] for p in inside) == min(loss["values"])
        assert max(p[1] for p in inside) == max(loss["values"])
        assert (loss["total_points"], loss["downsampled"]) == (len(inside), True)
    assert served == [True] * 8

    # Finer than the finest rollups: the points are reduced instead.
    assert len(read(admin, run_id, max_points=2_000)["loss"]["steps"]) <= 2_000
    assert served[-1] is False


def count_rows(factory: sessionmaker[Session]) -> dict[str, int]:
    with transaction(factory) as session:
        return {
            table.__tablename__: session.scalar(select(func.count()).select_from(table)) or 0
            for table in (MetricSeries, MetricPoint, MetricRollup)
        }


def test_deleting_runs_deletes_their_points_and_rollups(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    """Points and rollups have no foreign key to cascade along: the deletions remove them."""
    other = admin.post(
        "/api/v1/runs", json={"project": "vision", "manifest": training_run("b", "other")}
    ).json()
    log(admin, run_id, points("loss", range(1_000)) + points("acc", range(0, 1_000, 10)))
    log(admin, other["id"], points("loss", range(500)))
    factory = app.state.session_factory
    assert count_rows(factory)["metric_points"] == 1_600

    deleted = admin.delete(f"/api/v1/experiments/{other['experiment_id']}", params={"force": True})
    assert deleted.status_code == 200, deleted.text
    kept = stored(factory, run_id)
    assert count_rows(factory) == {
        "metric_series": 2,
        "metric_points": 1_100,
        "metric_rollups": sum(len(rollups) for rollups in kept[1].values()),
    }
    assert kept[1] == reference_rollups(kept[0])

    project_id = admin.get(f"/api/v1/runs/{run_id}").json()["project_id"]
    deleted = admin.delete(f"/api/v1/projects/{project_id}", params={"force": True})
    assert deleted.status_code == 200, deleted.text
    assert count_rows(factory) == {"metric_series": 0, "metric_points": 0, "metric_rollups": 0}


@postgres_only
def test_a_deletion_waits_for_a_batch_being_stored(app: FastAPI, run_id: int) -> None:
    """Without the foreign key, a batch committing after the deletion read the points would
    leave them orphaned: the batch's lock on its run makes the deletion wait for it."""
    factory = app.state.session_factory
    with transaction(factory) as session:
        project_id = session.scalar(
            text("SELECT project_id FROM runs WHERE id = :id"), {"id": run_id}
        )
    errors: list[BaseException] = []

    def delete_project() -> None:
        try:
            with transaction(factory) as session:
                core_projects.delete_project(
                    session=session, principal=SYSTEM, project_id=project_id, force=True
                )
        except BaseException as exc:  # reported below, from the main thread
            errors.append(exc)

    deleter = threading.Thread(target=delete_project)
    with transaction(factory) as session:
        core_metrics.ingest(
            session=session,
            principal=SYSTEM,
            run_id=run_id,
            batch=MetricBatch.model_validate({"points": points("loss", range(1_000))}),
        )
        deleter.start()
        deleter.join(timeout=1.0)
        assert deleter.is_alive(), "the deletion did not wait for the batch"
    deleter.join(timeout=30)
    assert not deleter.is_alive() and errors == []
    assert count_rows(factory) == {"metric_series": 0, "metric_points": 0, "metric_rollups": 0}


@pytest.fixture
def scratch_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of this test's own, for migrating down and up."""
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'scratch.db'}"
        return
    url = make_url(postgres_url())
    scratch = url.set(database=f"{url.database}_rollups")
    admin_engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch.database}"'))
        connection.execute(text(f'CREATE DATABASE "{scratch.database}"'))
    yield scratch.render_as_string(hide_password=False)
    with admin_engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch.database}" WITH (FORCE)'))
    admin_engine.dispose()


def test_migration_computes_the_rollups_of_stored_points(scratch_url: str, tmp_path: Path) -> None:
    engine = create_engine(scratch_url)
    schema.upgrade(engine)
    settings = load_settings(
        home=tmp_path / "home", database_url=scratch_url, admin_token=ADMIN_TOKEN, broker_url=None
    )
    app = create_app(settings)
    try:
        with TestClient(app, headers=bearer(ADMIN_TOKEN)) as admin:
            make_project(admin)
            run_id = submit(admin)["id"]
            rng = random.Random(3)
            steps = list(range(0, 70_000, 3))
            rng.shuffle(steps)
            for start in range(0, len(steps), 10_000):
                chunk = steps[start : start + 10_000]
                log(
                    admin,
                    run_id,
                    [{"key": "loss", "step": s, "value": rng.random()} for s in chunk],
                )
            log(admin, run_id, points("acc", range(0, 5_000, 50)))
        factory = app.state.session_factory
        assert isinstance(run_id, int)
        ingested = stored(factory, run_id)
        assert ingested[1] == reference_rollups(ingested[0])

        schema.downgrade(engine, "0004")
        schema.upgrade(engine)
        assert stored(factory, run_id) == ingested
    finally:
        app.state.engine.dispose()
        engine.dispose()


@postgres_only
def test_whole_reads_of_dense_and_gappy_series(admin: TestClient, run_id: int) -> None:
    """A series with a point at every step is read without its step array: the steps it
    answers must be the same as a gappy series' (read with it)."""
    dense = points("dense", range(5, 20_005), lambda s: s / 3)
    gappy = points("gappy", [*range(0, 12_000), *range(12_001, 20_002)], lambda s: -s / 3)
    for start in range(0, 20_000, 5_000):
        log(admin, run_id, dense[start : start + 5_000] + gappy[start : start + 5_000])
    log(admin, run_id, gappy[20_000:])
    for params, low, high in (
        ({}, 0, 30_000),
        ({"step_min": 11_990, "step_max": 12_010}, 11_990, 12_010),
    ):
        series = read(admin, run_id, **params)
        for key, expected in (("dense", dense), ("gappy", gappy)):
            inside = [p for p in expected if low <= p["step"] <= high]
            assert series[key]["steps"] == [p["step"] for p in inside]
            assert series[key]["values"] == [p["value"] for p in inside]
            assert len(series[key]["times"]) == len(inside)
            assert (series[key]["total_points"], series[key]["downsampled"]) == (len(inside), False)


@postgres_only
def test_a_batch_caught_in_a_deadlock_is_stored_all_the_same(
    app: FastAPI, admin: TestClient, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock between concurrent batches (the COPY of new steps does not sort them)
    rolls the loser back to its savepoint: a COPY falls back to the INSERT, an INSERT is
    tried again."""
    log(admin, run_id, points("loss", range(10)))
    deadlocks: list[str] = []
    execute = psycopg.Cursor.execute

    def deadlocked_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if query is core_metrics._PG_INSERT_POINTS and deadlocks.count("insert") < 2:
            deadlocks.append("insert")
            raise psycopg.errors.DeadlockDetected("deadlock detected (by the test)")
        return execute(self, query, *args, **kw)

    def deadlocked_copy(self: psycopg.Cursor[Any], *args: Any, **kw: Any) -> Any:
        deadlocks.append("copy")
        raise psycopg.errors.DeadlockDetected("deadlock detected (by the test)")

    monkeypatch.setattr(psycopg.Cursor, "execute", deadlocked_execute)
    overlapping = log(admin, run_id, points("loss", range(5, 20)))
    assert overlapping == {"accepted": 10, "duplicates": 5, "replayed": False}
    assert deadlocks == ["insert"] * 2
    monkeypatch.setattr(psycopg.Cursor, "copy", deadlocked_copy)
    fresh = log(admin, run_id, points("loss", range(20, 30)))
    assert fresh == {"accepted": 10, "duplicates": 0, "replayed": False}
    assert deadlocks == ["insert", "insert", "copy"]

    stored_points, rollups = stored(app.state.session_factory, run_id)
    assert [p[0] for p in stored_points["loss"]] == list(range(30))
    assert rollups == reference_rollups(stored_points)
