"""Metric points: ingest batches fast and idempotently, read series back whole or downsampled.

Postgres takes each batch as one INSERT over unnest()ed arrays and hands history back as
binary arrays; SQLite (embedded, small) takes an executemany and plain rows. Either way the
primary key (series_id, step) is what makes a re-sent point a duplicate instead of a new row.

Locks are always taken in one order, so concurrent batches for the same run wait on each
other but never deadlock: idempotency key, points (sorted by series and step), series rows
(sorted by id), then the run row.
"""

import struct
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.runs import load_run
from crucible.db.tables import IdempotencyRecord, MetricPoint, MetricSeries
from crucible.domain.downsample import MIN_POINTS, minmax_indices
from crucible.domain.enums import Role
from crucible.domain.errors import Conflict, InvalidInput
from crucible.schemas.common import MAX_INT64
from crucible.schemas.metrics import (
    IngestResult,
    MetricBatch,
    MetricHistory,
    MetricKeyPublic,
    MetricKeysPublic,
    MetricSeriesPublic,
)

SQL_DOWNSAMPLE_MIN_POINTS = 50_000
"""Above this many points a Postgres series is bucketed in SQL rather than fetched whole."""


def idempotency_scope(run_id: int) -> str:
    return f"metrics:{run_id}"


def _on_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _driver(session: Session) -> "psycopg.Connection[Any]":
    """The psycopg connection under the session's transaction, for what SQLAlchemy cannot
    pass through: binary-format arrays, several times cheaper than rows or text."""
    return cast("psycopg.Connection[Any]", session.connection().connection.driver_connection)


# --- ingest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Columns:
    """A batch as parallel lists; a time of None means "when received"."""

    keys: list[str]
    steps: list[int]
    values: list[float]
    times: list[float | None]

    @classmethod
    def of(cls, batch: MetricBatch) -> "_Columns":
        points = batch.points
        return cls(
            keys=[p["key"] for p in points],
            steps=[p["step"] for p in points],
            values=[p["value"] for p in points],
            times=[p.get("time") for p in points],
        )


@dataclass(frozen=True)
class _SeriesGain:
    """What one batch added to one series: the new-point count and its highest new step."""

    series_id: int
    added: int
    top_step: int
    top_value: float


def ingest(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    batch: MetricBatch,
    idempotency_key: str | None = None,
    request_digest: str = "",
) -> IngestResult:
    """Store the batch's new points; count the rest as duplicates.

    With an `idempotency_key`, a retry of the same request answers the first result without
    touching the points again; the key is claimed first, so a concurrent retry waits for the
    original and then replays it.
    """
    run = load_run(session, principal, run_id, Role.editor)
    if idempotency_key is not None:
        replayed = _claim_key(session, run.id, idempotency_key, request_digest)
        if replayed is not None:
            return replayed

    columns = _Columns.of(batch)
    gains: list[_SeriesGain] = []
    if columns.keys:
        series_ids = _intern_keys(session, run.id, sorted(set(columns.keys)))
        insert = _insert_points_postgres if _on_postgres(session) else _insert_points_portable
        gains = insert(session, series_ids, columns, time.time())
        _apply_gains(session, gains)
        top = max(columns.steps)
        if run.latest_step is None or top > run.latest_step:
            # Conditional, so concurrent batches can only move it forward.
            session.execute(
                text(
                    "UPDATE runs SET latest_step = :top WHERE id = :id "
                    "AND (latest_step IS NULL OR latest_step < :top)"
                ),
                {"top": top, "id": run.id},
            )

    accepted = sum(g.added for g in gains)
    result = IngestResult(accepted=accepted, duplicates=len(batch.points) - accepted)
    if idempotency_key is not None:
        _record_result(session, run.id, idempotency_key, request_digest, result)
    return result


def _claim_key(session: Session, run_id: int, key: str, digest: str) -> IngestResult | None:
    """Insert the key's record, or return the result stored under it by an earlier request."""
    scope = idempotency_scope(run_id)
    insert = pg_insert if _on_postgres(session) else sqlite_insert
    claimed = session.scalar(
        insert(IdempotencyRecord)
        .values(scope=scope, key=key, response={"digest": digest})
        .on_conflict_do_nothing()
        .returning(IdempotencyRecord.key)
    )
    if claimed is not None:
        return None
    stored = session.scalar(
        select(IdempotencyRecord.response).where(
            IdempotencyRecord.scope == scope, IdempotencyRecord.key == key
        )
    )
    if stored is None or "result" not in stored:  # claimed and released in between
        raise Conflict(f"the request with Idempotency-Key {key!r} left no answer; retry it")
    if stored.get("digest") != digest:
        raise Conflict(
            f"Idempotency-Key {key!r} was already used for a different batch of points; "
            "send each new batch with a new key"
        )
    return IngestResult.model_validate({**stored["result"], "replayed": True})


def _record_result(
    session: Session, run_id: int, key: str, digest: str, result: IngestResult
) -> None:
    session.execute(
        update(IdempotencyRecord)
        .where(IdempotencyRecord.scope == idempotency_scope(run_id), IdempotencyRecord.key == key)
        .values(response={"digest": digest, "result": result.model_dump(exclude={"replayed"})})
    )


def _intern_keys(session: Session, run_id: int, keys: list[str]) -> dict[str, int]:
    """Series ids for `keys` (sorted), creating the missing series; safe against a race."""
    query = select(MetricSeries.key, MetricSeries.id).where(
        MetricSeries.run_id == run_id, MetricSeries.key.in_(keys)
    )
    found: dict[str, int] = {key: series_id for key, series_id in session.execute(query).all()}
    missing = [k for k in keys if k not in found]
    if missing:
        insert = pg_insert if _on_postgres(session) else sqlite_insert
        session.execute(
            insert(MetricSeries).on_conflict_do_nothing(),
            [{"run_id": run_id, "key": k, "point_count": 0} for k in missing],
        )
        again = query.where(MetricSeries.key.in_(missing))
        found.update({key: series_id for key, series_id in session.execute(again).all()})
    return found


# ON CONFLICT DO NOTHING also drops a (key, step) repeated inside the batch, and sorting by
# position makes its first occurrence the one kept. Sorting by (series, step) first makes
# concurrent overlapping batches take the primary-key locks in one order.
_PG_INSERT_POINTS = """
WITH added AS (
    INSERT INTO metric_points (series_id, step, value, wall_time)
    SELECT u.series_id, u.step, u.value, u.wall_time
    FROM unnest(%(series)b, %(steps)b, %(values)b, %(times)b)
        WITH ORDINALITY AS u(series_id, step, value, wall_time, position)
    ORDER BY u.series_id, u.step, u.position
    ON CONFLICT DO NOTHING
    RETURNING series_id, step, value
), per_series AS (
    SELECT series_id, count(*) AS added, max(step) AS top_step FROM added GROUP BY series_id
)
SELECT p.series_id, p.added, p.top_step, a.value
FROM per_series AS p JOIN added AS a ON a.series_id = p.series_id AND a.step = p.top_step
"""


def _insert_points_postgres(
    session: Session, series_ids: dict[str, int], columns: _Columns, now: float
) -> list[_SeriesGain]:
    with _driver(session).cursor() as cursor:
        cursor.adapters.register_dumper(_Int8Array, _Int8ArrayDumper)
        cursor.adapters.register_dumper(_Float8Array, _Float8ArrayDumper)
        cursor.execute(
            _PG_INSERT_POINTS,
            {
                "series": _Int8Array([series_ids[k] for k in columns.keys]),
                "steps": _Int8Array(columns.steps),
                "values": _Float8Array(columns.values),
                "times": _Float8Array([now if t is None else t for t in columns.times]),
            },
        )
        return [_SeriesGain(*row) for row in cursor.fetchall()]


_INT8_OID, _FLOAT8_OID = 20, 701
_INT8_ARRAY_OID, _FLOAT8_ARRAY_OID = 1016, 1022


class _Int8Array(bytes):
    """A list of ints already in Postgres' binary bigint[] format. psycopg's own list
    dumper visits every element in Python, which costs more than the whole INSERT."""

    def __new__(cls, values: Sequence[int]) -> "_Int8Array":
        return super().__new__(cls, _binary_array(array("q", values), _INT8_OID))


class _Float8Array(bytes):
    """A list of floats already in Postgres' binary float8[] format."""

    def __new__(cls, values: Sequence[float]) -> "_Float8Array":
        return super().__new__(cls, _binary_array(array("d", values), _FLOAT8_OID))


def _binary_array(items: "array[Any]", element_oid: int) -> bytes:
    """One dimension, no NULLs: a 20-byte header, then per element its length (8) and its
    big-endian bytes, laid in with strided copies rather than a Python loop."""
    if sys.byteorder == "little":
        items.byteswap()
    data, n = items.tobytes(), len(items)
    out = bytearray(20 + 12 * n)
    struct.pack_into("!iiIii", out, 0, 1, 0, element_oid, n, 1)
    out[23::12] = b"\x08" * n
    for byte in range(8):
        out[24 + byte :: 12] = data[byte::8]
    return bytes(out)


class _Int8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = _INT8_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


class _Float8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = _FLOAT8_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def _insert_points_portable(
    session: Session, series_ids: dict[str, int], columns: _Columns, now: float
) -> list[_SeriesGain]:
    # Row by row in batch order, so a (key, step) repeated in the batch keeps its first value.
    params = [
        {"series_id": series_ids[k], "step": st, "value": v, "wall_time": now if t is None else t}
        for k, st, v, t in zip(
            columns.keys, columns.steps, columns.values, columns.times, strict=True
        )
    ]
    added = session.execute(
        sqlite_insert(MetricPoint)
        .on_conflict_do_nothing()
        .returning(MetricPoint.series_id, MetricPoint.step, MetricPoint.value),
        params,
    ).all()
    per_series: dict[int, tuple[int, int, float]] = {}
    for series_id, step, value in added:
        count, top_step, top_value = per_series.get(series_id, (0, -1, 0.0))
        if step > top_step:
            top_step, top_value = step, value
        per_series[series_id] = (count + 1, top_step, top_value)
    return [_SeriesGain(s, *gain) for s, gain in per_series.items()]


_UPDATE_SERIES = text("""
UPDATE metric_series SET
    point_count = point_count + :added,
    last_value = CASE WHEN last_step IS NULL OR :top_step > last_step
                      THEN :top_value ELSE last_value END,
    last_step = CASE WHEN last_step IS NULL OR :top_step > last_step
                     THEN :top_step ELSE last_step END
WHERE id = :series_id
""")


def _apply_gains(session: Session, gains: list[_SeriesGain]) -> None:
    """Keep each series' count and last point right. A top step above the stored last step
    was necessarily new, so the last value only ever comes from a point this batch stored."""
    if gains:
        ordered = sorted(gains, key=lambda g: g.series_id)  # lock order: by id
        session.execute(_UPDATE_SERIES, [g.__dict__ for g in ordered])


# --- history --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Points:
    steps: list[int]
    values: list[float]
    times: list[float]

    def pick(self, indices: Sequence[int]) -> "_Points":
        return _Points(
            [self.steps[i] for i in indices],
            [self.values[i] for i in indices],
            [self.times[i] for i in indices],
        )


def list_keys(*, session: Session, principal: Principal, run_id: int) -> MetricKeysPublic:
    run = load_run(session, principal, run_id, Role.viewer)
    rows = session.execute(
        select(
            MetricSeries.key,
            MetricSeries.point_count,
            MetricSeries.last_step,
            MetricSeries.last_value,
        )
        .where(MetricSeries.run_id == run.id, MetricSeries.point_count > 0)
        .order_by(MetricSeries.key)
    ).all()
    return MetricKeysPublic(
        run_id=run.id, keys=[MetricKeyPublic.model_validate(row._mapping) for row in rows]
    )


def history(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    keys: list[str] | None = None,
    max_points: int | None = None,
    step_min: int | None = None,
    step_max: int | None = None,
) -> MetricHistory:
    """The run's series in step order, between `step_min` and `step_max` inclusive, each cut
    to `max_points` (keeping first, last and per-bucket min and max) when given.

    Built unvalidated: the data comes from our own columns, and validating a million-element
    list would cost more than reading it."""
    run = load_run(session, principal, run_id, Role.viewer)
    if max_points is not None and max_points < MIN_POINTS:
        raise InvalidInput(
            "max_points", max_points, f"ask for at least {MIN_POINTS} points", location="query"
        )
    low = 0 if step_min is None else step_min
    high = MAX_INT64 if step_max is None else step_max

    query = (
        select(MetricSeries.id, MetricSeries.key, MetricSeries.point_count)
        .where(MetricSeries.run_id == run.id, MetricSeries.point_count > 0)
        .order_by(MetricSeries.key)
    )
    if keys is not None:
        query = query.where(MetricSeries.key.in_(keys))
    on_postgres = _on_postgres(session)
    if on_postgres:
        # JIT compilation would start at ~400,000 rows and cost more than it saves.
        session.execute(text("SET LOCAL jit = off"))
    series: list[MetricSeriesPublic] = []
    for series_id, key, point_count in session.execute(query).all():
        if on_postgres and max_points is not None and point_count > SQL_DOWNSAMPLE_MIN_POINTS:
            points, total = _downsample_postgres(session, series_id, low, high, max_points)
        else:
            fetch = _fetch_postgres if on_postgres else _fetch_portable
            points = fetch(session, series_id, low, high)
            total = len(points.steps)
            if max_points is not None and total > max_points:
                points = points.pick(minmax_indices(points.values, max_points))
        if total:
            series.append(
                MetricSeriesPublic.model_construct(
                    key=key,
                    steps=points.steps,
                    values=points.values,
                    times=points.times,
                    total_points=total,
                    downsampled=len(points.steps) < total,
                )
            )
    return MetricHistory.model_construct(run_id=run.id, series=series)


def _fetch_portable(session: Session, series_id: int, low: int, high: int) -> _Points:
    rows = session.execute(
        select(MetricPoint.step, MetricPoint.value, MetricPoint.wall_time)
        .where(MetricPoint.series_id == series_id, MetricPoint.step.between(low, high))
        .order_by(MetricPoint.step)
    ).all()
    if not rows:
        return _Points([], [], [])
    steps, values, times = zip(*rows, strict=True)
    return _Points(list(steps), list(values), list(times))


# Aggregating the output of a sorted subquery keeps its order (the documented alternative
# to ORDER BY inside each aggregate, which would sort three times).
_PG_SERIES_ARRAYS = """
SELECT array_agg(step), array_agg(value), array_agg(wall_time) FROM (
    SELECT step, value, wall_time FROM metric_points
    WHERE series_id = %(series)s AND step BETWEEN %(low)s AND %(high)s
    ORDER BY step
) AS p
"""


def _fetch_postgres(session: Session, series_id: int, low: int, high: int) -> _Points:
    with _driver(session).cursor(binary=True) as cursor:
        cursor.execute(_PG_SERIES_ARRAYS, {"series": series_id, "low": low, "high": high})
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return _Points([], [], [])
    return _Points(row[0], row[1], row[2])


_PG_BOUNDS = """
SELECT min(step), max(step), (
    SELECT count(*) FROM (
        SELECT 1 FROM metric_points
        WHERE series_id = %(series)s AND step BETWEEN %(low)s AND %(high)s
        LIMIT %(enough)s
    ) AS head
)
FROM metric_points WHERE series_id = %(series)s AND step BETWEEN %(low)s AND %(high)s
"""

# Buckets are equal step ranges over the interior (first < step < last). Each keeps its
# lowest and highest point: ARRAY[value, step] makes min() and max() carry the step along
# (exact for steps below 2**53), built once per row inside the fenced (OFFSET 0) subquery,
# which costs a third less than building it for each aggregate.
_PG_BUCKETS = """
SELECT (min(pair))[2]::bigint, (max(pair))[2]::bigint, count(*)
FROM (
    SELECT ARRAY[value, step] AS pair, (step - %(first)s - 1) / %(width)s AS bucket
    FROM metric_points
    WHERE series_id = %(series)s AND step > %(first)s AND step < %(last)s
    OFFSET 0
) AS p
GROUP BY bucket
"""

_PG_POINTS_AT = """
SELECT step, value, wall_time FROM metric_points
WHERE series_id = %(series)s AND step = ANY(%(steps)s) ORDER BY step
"""


def _downsample_postgres(
    session: Session, series_id: int, low: int, high: int, max_points: int
) -> tuple[_Points, int]:
    """Min/max buckets computed by Postgres, so a million-point series never leaves it."""
    driver = _driver(session)
    bounds = {"series": series_id, "low": low, "high": high, "enough": max_points + 1}
    with driver.cursor(binary=True) as cursor:
        cursor.execute(_PG_BOUNDS, bounds)
        first, last, head = cast(tuple[int | None, int | None, int], cursor.fetchone())
        if first is None or last is None:
            return _Points([], [], []), 0
        if head <= max_points:
            points = _fetch_postgres(session, series_id, low, high)
            return points, len(points.steps)
        buckets = (max_points - 2) // 2
        width = -(-(last - first - 1) // buckets)  # ceil: at most `buckets` buckets
        cursor.execute(
            _PG_BUCKETS, {"series": series_id, "first": first, "last": last, "width": width}
        )
        keep = {first, last}
        total = 2
        for low_step, high_step, count in cursor.fetchall():
            keep.update((low_step, high_step))
            total += count
        cursor.execute(_PG_POINTS_AT, {"series": series_id, "steps": sorted(keep)})
        rows = cursor.fetchall()
    steps, values, times = zip(*rows, strict=True)
    return _Points(list(steps), list(values), list(times)), total
