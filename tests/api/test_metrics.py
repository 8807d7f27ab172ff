"""Metric ingestion and history, on SQLite and Postgres."""

import math
import random
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from crucible.core.metrics.store import MetricStore
from crucible.db import schema
from crucible.db.engine import transaction
from crucible.db.tables import MetricChunk, MetricSeries
from crucible.domain.chunks import MAX_CHUNK_POINTS, PackedChunk, Points, unpack
from crucible.domain.downsample import Rollup, rollup_of
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


def test_columns_store_the_same_points_as_rows(admin: TestClient, run_id: int) -> None:
    columns = [
        {
            "keys": ["loss", "lr"],
            "steps": [0, 1, 2],
            "times": [1_700_000_000.0, 1_700_000_001.0, 1_700_000_002.0],
            "values": [2.0, 0.1, 1.5, 0.1, 1.2, 0.05],
        },
        {"keys": ["acc"], "steps": [2], "values": [0.5]},
    ]
    body = {"rows": [{"step": 0, "values": {"loss": 9.0}}], "columns": columns}
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json=body)
    assert response.status_code == 200, response.text
    # The row for (loss, 0) comes before the columns, so it wins over their value.
    assert response.json() == {"accepted": 7, "duplicates": 1, "replayed": False}
    series = read(admin, run_id)
    assert (series["loss"]["steps"], series["loss"]["values"]) == ([0, 1, 2], [9.0, 1.5, 1.2])
    assert (series["lr"]["values"], series["lr"]["times"]) == (
        [0.1, 0.1, 0.05],
        [1_700_000_000.0, 1_700_000_001.0, 1_700_000_002.0],
    )
    assert series["acc"]["steps"] == [2] and series["acc"]["times"][0] > 1.7e9


def test_bad_columns_are_422_naming_the_field(admin: TestClient, run_id: int) -> None:
    good = {"keys": ["fine"], "steps": [0], "values": [0.0]}
    bad_groups: list[tuple[dict[str, Any], list[Any], str]] = [
        ({"keys": ["a", "b"], "steps": [1, 2], "values": [1.0, 2.0, 3.0]}, [], "values holds 3"),
        ({"keys": ["a", "a"], "steps": [1], "values": [1.0, 2.0]}, [], "keys repeats ['a']"),
        (
            {"keys": ["a"], "steps": [1, 2], "times": [1.7e9], "values": [1.0, 2.0]},
            [],
            "times holds 1 times for 2 steps",
        ),
        ({"keys": ["a,b"], "steps": [1], "values": [1.0]}, ["keys", 0], "pattern"),
        ({"keys": ["a"], "steps": [-1], "values": [1.0]}, ["steps", 0], "greater than"),
        ({"keys": ["a"], "steps": [1], "values": ["high"]}, ["values", 0], "number"),
        ({"keys": [], "steps": [1], "values": []}, ["keys"], "at least 1"),
        ({"keys": ["a"], "steps": [1], "values": [1.0], "colour": "red"}, ["colour"], "Extra"),
    ]
    for group, where, message in bad_groups:
        response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"columns": [good, group]})
        assert response.status_code == 422, group
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "columns", 1, *where], (group, error)
        assert message in error["msg"], (group, error)
    response = admin.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=b'{"columns": [{"keys": ["a"], "steps": [1], "values": [NaN]}]}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "finite_number"
    assert read(admin, run_id) == {}


def test_columns_count_towards_the_10000_points_of_a_batch(admin: TestClient, run_id: int) -> None:
    columns = [
        {"keys": [f"m{k}" for k in range(100)], "steps": list(range(100)), "values": [0.0] * 10_000}
    ]
    body = {"points": [{"key": "loss", "step": 0, "value": 0.0}], "columns": columns}
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json=body)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert "holds 10001 points; at most 10000" in error["msg"]
    assert read(admin, run_id) == {}


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


# --- the chunked store ------------------------------------------------------------------------

postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

StoredPoint = tuple[int, float, float]
"""(step, value, time)"""


@dataclass
class Stored:
    """A run's chunks as the database holds them, by key."""

    chunks: dict[str, list[tuple[Rollup, list[StoredPoint]]]]
    series: dict[str, tuple[int, int | None, float | None, int]]
    """key -> point_count, last_step, last_value, max_chunk_span"""

    def points(self, key: str) -> list[StoredPoint]:
        return sorted(p for _, members in self.chunks[key] for p in members)


def stored(factory: sessionmaker[Session], run_id: int) -> Stored:
    with transaction(factory) as session:
        series_rows = session.execute(
            select(
                MetricSeries.id,
                MetricSeries.key,
                MetricSeries.point_count,
                MetricSeries.last_step,
                MetricSeries.last_value,
                MetricSeries.max_chunk_span,
            ).where(MetricSeries.run_id == run_id)
        ).all()
        keys = {row[0]: row[1] for row in series_rows}
        fields = [getattr(MetricChunk, field) for field in Rollup._fields]
        chunk_rows = session.execute(
            select(
                MetricChunk.series_id,
                MetricChunk.steps,
                MetricChunk.values,
                MetricChunk.times,
                *fields,
            )
            .where(MetricChunk.series_id.in_(keys))
            .order_by(MetricChunk.series_id, MetricChunk.first_step)
        ).all()
    chunks: dict[str, list[tuple[Rollup, list[StoredPoint]]]] = {key: [] for key in keys.values()}
    for series_id, steps, values, times, *summary in chunk_rows:
        rollup = Rollup(*summary)
        members = unpack(PackedChunk(rollup.first_step, rollup.point_count, steps, values, times))
        chunks[keys[series_id]].append(
            (rollup, list(zip(members.steps, members.values, members.times, strict=True)))
        )
    return Stored(chunks, {row[1]: tuple(row[2:]) for row in series_rows})  # type: ignore[misc]


def assert_consistent(store: Stored) -> None:
    """Every chunk's summary is that of its points, no step is stored twice, and each
    series' row (count, last point, widest chunk) agrees with its chunks."""
    for key, chunks in store.chunks.items():
        steps = [p[0] for _, members in chunks for p in members]
        assert len(steps) == len(set(steps)), f"{key}: a step is stored twice"
        for rollup, members in chunks:
            assert members == sorted(members), f"{key}: a chunk out of step order"
            assert rollup == rollup_of(members)
        count, last_step, last_value, widest = store.series[key]
        everything = store.points(key)
        assert count == len(everything)
        if everything:
            assert (last_step, last_value) == everything[-1][:2]
        assert widest == max((r.last_step - r.first_step for r, _ in chunks), default=0)


class ReadCounter:
    """How many points the history reads from chunks (the summaries aside)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.points = 0
        chunks_in, packed_at = MetricStore.chunks_in, MetricStore.packed_at

        def counted_chunks_in(*args: Any) -> list[Points]:
            chunks = chunks_in(*args)
            self.points += sum(len(chunk.steps) for chunk in chunks)
            return chunks

        def counted_packed_at(*args: Any) -> list[PackedChunk]:
            chunks = packed_at(*args)
            self.points += sum(chunk.point_count for chunk in chunks)
            return chunks

        monkeypatch.setattr(MetricStore, "chunks_in", counted_chunks_in)
        monkeypatch.setattr(MetricStore, "packed_at", counted_packed_at)


def test_a_batch_is_a_chunk_per_series_of_at_most_max_chunk_points(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    log(admin, run_id, points("loss", range(1_000)) + points("lr", range(0, 1_000, 10)))
    log(admin, run_id, points("loss", range(1_000, 1_500)))
    store = stored(app.state.session_factory, run_id)
    assert MAX_CHUNK_POINTS == 512
    assert [r.point_count for r, _ in store.chunks["loss"]] == [512, 488, 500]
    assert [r.point_count for r, _ in store.chunks["lr"]] == [100]
    assert_consistent(store)


def test_large_series_is_downsampled_from_chunk_summaries(
    admin: TestClient, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 120_000
    rng = random.Random(7)
    values = [rng.uniform(-1, 1) for _ in range(n)]
    values[77_777], values[3_333] = 50.0, -50.0
    for start in range(0, n, 2_000):
        batch = [
            {"key": "loss", "step": s, "value": values[s]} for s in range(start, start + 2_000)
        ]
        assert log(admin, run_id, batch)["accepted"] == 2_000

    reads = ReadCounter(monkeypatch)

    def check(loss: dict[str, Any], budget: int) -> None:
        assert len(loss["steps"]) <= budget
        assert loss["steps"] == sorted(set(loss["steps"]))
        assert {0, 3_333, 77_777, n - 1} <= set(loss["steps"])
        assert loss["values"] == [values[s] for s in loss["steps"]]
        assert len(loss["times"]) == len(loss["steps"])
        assert (loss["total_points"], loss["downsampled"]) == (n, True)

    # Chunks of 512 steps fit in the output buckets of these budgets: no point is read.
    for budget in (4, 50, 100):
        check(read(admin, run_id, max_points=budget)["loss"], budget)
    assert reads.points == 0

    # Buckets narrower than a chunk: the chunks' points are read and reduced.
    check(read(admin, run_id, max_points=2_000)["loss"], 2_000)
    assert reads.points == n

    # A step range inside the series: cut when it is larger than the budget, and only the
    # chunks crossing its ends are read whole...
    reads.points = 0
    ranged = read(admin, run_id, max_points=6, step_min=70_500, step_max=89_999)["loss"]
    assert ranged["steps"][0] == 70_500 and ranged["steps"][-1] == 89_999
    assert 77_777 in ranged["steps"] and len(ranged["steps"]) <= 6
    assert ranged["total_points"] == 19_500
    assert ranged["values"] == [values[s] for s in ranged["steps"]]
    assert reads.points == 512  # the chunk of steps 70,000 to 70,511
    # ...and whole when it fits.
    small = read(admin, run_id, max_points=100, step_min=500, step_max=549)["loss"]
    assert (small["steps"], small["downsampled"]) == (list(range(500, 550)), False)


@postgres_only
def test_concurrent_overlapping_batches_neither_deadlock_nor_duplicate(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    """The same points sent in different orders at once (a client retrying while the first
    try is still running) must all end up stored once, whichever request stores them."""
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
    assert_consistent(stored(app.state.session_factory, run_id))


def test_chunks_hold_exactly_the_stored_points(
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

    sent: dict[str, dict[int, float]] = {}
    for batch in (forward, backward, sparse, repeated, overlapping):
        log(admin, run_id, batch)
        for point in batch:
            sent.setdefault(point["key"], {}).setdefault(point["step"], point["value"])
        store = stored(factory, run_id)
        assert_consistent(store)
        for key, expected in sent.items():
            assert [(p[0], p[1]) for p in store.points(key)] == sorted(expected.items())

    before = stored(factory, run_id)
    for batch in (forward, backward, repeated, overlapping):
        assert log(admin, run_id, batch)["accepted"] == 0
    assert stored(factory, run_id) == before

    loss = before.points("loss")
    assert (loss[-2][1], loss[-1][1]) == (1.0, -1.0)  # the first of a repeated step won
    whole = read(admin, run_id)
    assert whole["loss"]["steps"] == [p[0] for p in loss]
    assert whole["loss"]["values"] == [p[1] for p in loss]
    assert whole["loss"]["times"] == [p[2] for p in loss]


def test_downsampled_reads_of_interleaved_chunks_keep_the_promises(
    app: FastAPI, admin: TestClient, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches that each hold a random sample of a window of steps, so that the chunks of
    the series overlap one another: a downsampled read keeps the ends and the extremes,
    from the summaries when the chunks are narrower than its buckets."""
    n = 30_000
    rng = random.Random(5)
    values = {s: rng.gauss(0, 1) for s in range(n)}
    values[12_345], values[23_456] = 40.0, -40.0
    batches: list[list[int]] = []
    for start in range(0, n, 1_000):  # each window of 1,000 steps in two interleaved chunks
        window = list(range(start, start + 1_000))
        rng.shuffle(window)
        batches += [window[:600], window[600:]]
    rng.shuffle(batches)
    for steps in batches:
        log(admin, run_id, [{"key": "loss", "step": s, "value": values[s]} for s in steps])
    series = stored(app.state.session_factory, run_id).points("loss")
    assert [p[0] for p in series] == list(range(n))

    reads = ReadCounter(monkeypatch)
    for budget in (4, 5, 30, 60):
        loss = read(admin, run_id, max_points=budget)["loss"]
        kept = list(zip(loss["steps"], loss["values"], loss["times"], strict=True))
        assert set(kept) <= set(series)
        assert kept == sorted(kept) and len(kept) <= budget
        assert (kept[0], kept[-1]) == (series[0], series[-1])
        assert {12_345, 23_456} <= set(loss["steps"])
        assert (loss["total_points"], loss["downsampled"]) == (n, True)
    assert reads.points == 0

    for low, high, budget in ((1, 29_998, 20), (12_000, 12_999, 20), (100, 23_456, 500)):
        loss = read(admin, run_id, max_points=budget, step_min=low, step_max=high)["loss"]
        inside = [p for p in series if low <= p[0] <= high]
        kept = list(zip(loss["steps"], loss["values"], loss["times"], strict=True))
        assert set(kept) <= set(inside)
        assert kept == sorted(kept) and len(kept) <= budget
        assert (kept[0], kept[-1]) == (inside[0], inside[-1])
        assert min(p[1] for p in inside) == min(loss["values"])
        assert max(p[1] for p in inside) == max(loss["values"])
        assert (loss["total_points"], loss["downsampled"]) == (len(inside), True)


def count_rows(factory: sessionmaker[Session]) -> dict[str, int]:
    with transaction(factory) as session:
        return {
            table.__tablename__: session.scalar(select(func.count()).select_from(table)) or 0
            for table in (MetricSeries, MetricChunk)
        }


def test_deleting_runs_deletes_their_series_and_chunks(
    app: FastAPI, admin: TestClient, run_id: int
) -> None:
    other = admin.post(
        "/api/v1/runs", json={"project": "vision", "manifest": training_run("b", "other")}
    ).json()
    log(admin, run_id, points("loss", range(1_000)) + points("acc", range(0, 1_000, 10)))
    log(admin, run_id, points("loss", range(1_000, 1_100)))
    log(admin, other["id"], points("loss", range(500)))
    factory = app.state.session_factory
    assert count_rows(factory) == {"metric_series": 3, "metric_chunks": 5}

    deleted = admin.delete(f"/api/v1/experiments/{other['experiment_id']}", params={"force": True})
    assert deleted.status_code == 200, deleted.text
    assert count_rows(factory) == {"metric_series": 2, "metric_chunks": 4}
    assert len(stored(factory, run_id).points("loss")) == 1_100

    project_id = admin.get(f"/api/v1/runs/{run_id}").json()["project_id"]
    deleted = admin.delete(f"/api/v1/projects/{project_id}", params={"force": True})
    assert deleted.status_code == 200, deleted.text
    assert count_rows(factory) == {"metric_series": 0, "metric_chunks": 0}


@postgres_only
def test_a_deletion_waits_for_a_batch_being_stored(app: FastAPI, run_id: int) -> None:
    """The batch's lock on its run makes a deletion of the run wait for it (and then cascade
    to its chunks), rather than the batch failing on a foreign key at commit."""
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
    assert count_rows(factory) == {"metric_series": 0, "metric_chunks": 0}


@pytest.fixture
def scratch_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of this test's own, for migrating down and up."""
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'scratch.db'}"
        return
    url = make_url(postgres_url())
    scratch = url.set(database=f"{url.database}_chunks")
    admin_engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch.database}"'))
        connection.execute(text(f'CREATE DATABASE "{scratch.database}"'))
    yield scratch.render_as_string(hide_password=False)
    with admin_engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch.database}" WITH (FORCE)'))
    admin_engine.dispose()


def rows_of_revision_0010(engine: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """metric_points and metric_rollups as revision 0010 stores them."""
    with engine.connect() as connection:
        point_rows = connection.execute(
            text("SELECT series_id, step, value, wall_time FROM metric_points ORDER BY 1, 2")
        ).all()
        rollup_rows = connection.execute(
            text(
                "SELECT series_id, level, bucket, point_count, first_step, last_step, "
                "min_step, min_value, max_step, max_value FROM metric_rollups ORDER BY 1, 2, 3"
            )
        ).all()
    return [tuple(r) for r in point_rows], [tuple(r) for r in rollup_rows]


def test_migration_turns_points_into_chunks_and_back(scratch_url: str, tmp_path: Path) -> None:
    """Down to the point rows (with revision 0005's rollups of them) and up again: the same
    points, chunks that summarise them, and the same history."""
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
                part = steps[start : start + 10_000]
                log(
                    admin, run_id, [{"key": "loss", "step": s, "value": rng.random()} for s in part]
                )
            log(admin, run_id, points("acc", range(0, 5_000, 50)))
            history = read(admin, run_id)
            reduced = read(admin, run_id, max_points=300)
            factory = app.state.session_factory
            before = stored(factory, run_id)

            schema.downgrade(engine, "0010")
            point_rows, rollup_rows = rows_of_revision_0010(engine)
            series_ids = {key: i for i, key in _series_ids(engine)}
            expected_points = sorted(
                (series_ids[key], *p) for key in before.chunks for p in before.points(key)
            )
            assert point_rows == expected_points
            assert rollup_rows == _rollups_as_revision_0005(point_rows)

            schema.upgrade(engine)
            after = stored(factory, run_id)
            assert_consistent(after)
            for key in before.chunks:
                assert after.points(key) == before.points(key)
            assert read(admin, run_id) == history
            assert read(admin, run_id, max_points=300)["acc"] == reduced["acc"]
            loss = read(admin, run_id, max_points=300)["loss"]
            assert (loss["steps"][0], loss["steps"][-1]) == (0, 69_999)
            assert max(loss["values"]) == max(history["loss"]["values"])
    finally:
        app.state.engine.dispose()
        engine.dispose()


def _series_ids(engine: Any) -> list[tuple[int, str]]:
    with engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text("SELECT id, key FROM metric_series"))]


def _rollups_as_revision_0005(point_rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Revision 0005's rollups: per series, buckets of 2**level steps for levels 6 to 16."""
    by_bucket: dict[tuple[int, int, int], list[StoredPoint]] = {}
    for series_id, step, value, wall_time in point_rows:
        for level in range(6, 17):
            by_bucket.setdefault((series_id, level, step >> level), []).append(
                (step, value, wall_time)
            )
    rows = []
    for (series_id, level, bucket), members in sorted(by_bucket.items()):
        r = rollup_of(members)
        rows.append(
            (
                series_id,
                level,
                bucket,
                r.point_count,
                r.first_step,
                r.last_step,
                r.min_step,
                r.min_value,
                r.max_step,
                r.max_value,
            )
        )
    return rows


def test_whole_reads_of_dense_and_gappy_series(admin: TestClient, run_id: int) -> None:
    """A chunk holding every step of its range is stored without its step array: the steps
    it answers must be the same as a gappy series' (stored with it)."""
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
