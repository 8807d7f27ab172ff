"""`MetricShipper.add`, the work `run.log` does in the training thread: keys checked once and
remembered, values copied as floats, non-finite ones skipped, rows handed to the sender in
order, within the bound. No server: the client here records what would be sent."""

import logging
import math
import threading
from typing import Any

import orjson
import pytest

from crucible.client import CrucibleClient
from crucible.sdk.metrics import MetricShipper


class RecordingClient(CrucibleClient):
    """Stands in for the API client: every body the shipper sends, decoded. With `gate`, a
    request waits for it to be set, as for a slow API."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._gate = gate

    def request(self, method: str, path: str, **kwargs: Any) -> None:
        if self._gate is not None:
            assert self._gate.wait(10)
        self.bodies.append(orjson.loads(kwargs["content"]))


def shipper(client: RecordingClient, **kwargs: Any) -> MetricShipper:
    # An interval nothing reaches: rows go when a batch is full or a test flushes.
    options: dict[str, Any] = {"max_buffered_points": 1_000, "flush_interval": 3600.0}
    return MetricShipper(client, 1, **(options | kwargs))


def sent_rows(client: RecordingClient) -> list[dict[str, Any]]:
    return [row for body in client.bodies for row in rows_of_columns(body)]


def rows_of_columns(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows a body's `columns` hold, one per step, in order."""
    rows = []
    for group in body["columns"]:
        keys, values = group["keys"], group["values"]
        width = len(keys)
        for index, (step, time) in enumerate(zip(group["steps"], group["times"], strict=True)):
            row_values = dict(zip(keys, values[index * width : (index + 1) * width], strict=True))
            rows.append({"step": step, "time": time, "values": row_values})
    return rows


def test_an_invalid_key_raises_on_every_call_after_valid_keys_were_remembered() -> None:
    client = RecordingClient()
    metrics = shipper(client)
    try:
        metrics.add({"loss": 1.0, "acc": 0.5}, 0)
        metrics.add({"loss": 0.9, "acc": 0.6}, 1)  # both keys known now
        for step in (2, 3):
            with pytest.raises(ValueError, match="metric key 'a,b' is invalid"):
                metrics.add({"loss": 0.8, "a,b": 1.0}, step)
        for bad in ("", "x" * 251, "tab\there", 7):
            with pytest.raises(ValueError, match="is invalid"):
                metrics.add({"loss": 0.8, bad: 1.0}, 4)  # type: ignore[dict-item]
        assert metrics.pending_points == 4, "a call that raised buffers nothing"
        metrics.add({"loss": 0.7}, 5)
        assert metrics.flush(timeout=10)
    finally:
        metrics.close(timeout=10)
    assert [(r["step"], r["values"]) for r in sent_rows(client)] == [
        (0, {"loss": 1.0, "acc": 0.5}),
        (1, {"loss": 0.9, "acc": 0.6}),
        (5, {"loss": 0.7}),
    ]


def test_values_are_copied_as_floats_and_non_finite_ones_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = RecordingClient()
    metrics = shipper(client)
    try:
        values: dict[str, Any] = {"int": 3, "bool": True, "big": 1e308, "bigger": 1e308}
        metrics.add(values, 0)  # the sum overflows; every value is finite and kept
        values["int"] = 4  # the caller reuses its dict
        metrics.add({"nan": math.nan, "inf": math.inf, "ok": 0.5}, 1)
        metrics.add({"plus": math.inf, "minus": -math.inf}, 2)  # the sum is NaN
        metrics.add({}, 3)
        assert metrics.flush(timeout=10)
    finally:
        metrics.close(timeout=10)
    rows = sent_rows(client)
    assert [(r["step"], r["values"]) for r in rows] == [
        (0, {"int": 3.0, "bool": 1.0, "big": 1e308, "bigger": 1e308}),
        (1, {"ok": 0.5}),
    ]
    assert all(type(v) is float for r in rows for v in r["values"].values())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'nan' is nan at step 1" in warnings[0].getMessage()


def test_past_the_bound_the_oldest_rows_are_dropped_and_counted() -> None:
    client = RecordingClient()
    metrics = shipper(client, max_buffered_points=50)
    try:
        for step in range(30):
            metrics.add({"a": float(step), "b": float(step)}, step)
        assert metrics.dropped_points == 10
        assert metrics.pending_points == 50
        assert metrics.flush(timeout=10)
    finally:
        metrics.close(timeout=10)
    assert [r["step"] for r in sent_rows(client)] == list(range(5, 30))


def test_rows_go_in_order_in_batches_of_at_most_batch_points() -> None:
    gate = threading.Event()  # the first batch waits: the rest pile up behind it
    client = RecordingClient(gate)
    metrics = shipper(client, batch_points=12)
    try:
        for step in range(10):
            metrics.add({"a": float(step), "b": float(step)}, step)
        metrics.add({f"m{k}": float(k) for k in range(30)}, 10)  # one call, three rows
        assert metrics.pending_points == 50
        gate.set()
        assert metrics.flush(timeout=10)
    finally:
        metrics.close(timeout=10)
    assert len(client.bodies) >= 5
    assert all(sum(len(g["values"]) for g in body["columns"]) <= 12 for body in client.bodies)
    rows = sent_rows(client)
    assert [r["step"] for r in rows] == [*range(10), 10, 10, 10]
    assert [len(r["values"]) for r in rows[-3:]] == [12, 12, 6]
    assert {k: v for r in rows[-3:] for k, v in r["values"].items()} == {
        f"m{k}": float(k) for k in range(30)
    }
