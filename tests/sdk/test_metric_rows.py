"""The SDK's wire form of logged metrics: `log` calls that logged the same keys, as
`MetricBatch.columns`."""

import orjson
import pytest

from crucible.schemas.metrics import MetricBatch
from crucible.sdk import metrics
from crucible.sdk.metrics import _encode, _rows_of
from tests.sdk.test_metric_log import rows_of_columns


def test_a_batch_encodes_as_columns_the_api_reads_back_point_for_point() -> None:
    rows = [
        (step, 1_700_000_000.0 + step, {"loss": 1.0 / (step + 1), "lr": 0.1}) for step in range(700)
    ]
    rows[500:] = [(s, t, {"lr": v["lr"], "loss": v["loss"]}) for s, t, v in rows[500:]]
    body = _encode(rows)
    decoded = orjson.loads(body)
    assert list(decoded) == ["columns"]
    # Keys in another order start a new group: the keys name the values' positions.
    assert [(g["keys"], len(g["steps"])) for g in decoded["columns"]] == [
        (["loss", "lr"], 500),
        (["lr", "loss"], 200),
    ]
    assert decoded["columns"][0]["values"][6:8] == [0.25, 0.1]
    assert rows_of_columns(decoded)[3] == {
        "step": 3,
        "time": 1_700_000_003.0,
        "values": {"loss": 0.25, "lr": 0.1},
    }
    batch = MetricBatch.model_validate_json(body)
    assert batch.point_count == 1_400
    assert [s for group in batch.columns for s in group.steps] == list(range(700))


def test_encoding_yields_between_chunks_of_points(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(metrics.time, "sleep", sleeps.append)
    rows = [(step, 1_700_000_000.0, {f"m{k}": 0.0 for k in range(20)}) for step in range(100)]
    _encode(rows)
    # 2,000 points in chunks of at least ENCODE_CHUNK_POINTS: a yield after each full chunk.
    assert len(sleeps) == 2_000 // metrics.ENCODE_CHUNK_POINTS


def test_a_call_with_more_points_than_a_batch_is_split_into_rows_of_one_step() -> None:
    numbers = {f"m{k}": float(k) for k in range(25)}
    rows = _rows_of(7, 1_700_000_000.0, numbers, limit=10)
    assert [len(r[2]) for r in rows] == [10, 10, 5]
    assert {r[0] for r in rows} == {7}
    assert {k: v for r in rows for k, v in r[2].items()} == numbers
    assert _rows_of(7, 1_700_000_000.0, {}, limit=10) == []


def test_a_batch_of_uneven_rows_encodes_every_row_once_in_order_across_yields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr(metrics.time, "sleep", sleeps.append)
    monkeypatch.setattr(metrics, "ENCODE_CHUNK_POINTS", 2_000)
    rows = [
        (step, 1_700_000_000.0 + step, {f"m{k}": step + k / 10 for k in range(1 + step % 37)})
        for step in range(500)
    ]
    body = _encode(rows)
    assert rows_of_columns(orjson.loads(body)) == [
        {"step": s, "time": t, "values": v} for s, t, v in rows
    ]
    # 9,329 points: a yield after each 2,000 or so.
    assert sum(len(r[2]) for r in rows) == 9_329
    assert len(sleeps) == 4
