"""Metric points: ingest batches fast and idempotently, read series back whole or downsampled.

Postgres takes a batch of new steps as one binary COPY, and anything that may repeat a stored
point as one INSERT ... ON CONFLICT DO NOTHING over unnest()ed arrays; history comes back as
binary arrays. SQLite (embedded, small) takes an executemany and plain rows. Either way the
primary key (series_id, step) is what makes a re-sent point a duplicate instead of a new row.

Each batch also updates the series' rollups (`metric_rollups`: count, first, last, lowest and
highest point per bucket of 2**level steps) from the points it actually stored, in the same
transaction, so a downsampled read of a long series reads summaries instead of points.

Points and rollups have no foreign key to their series (checking it cost half of every
insert): `delete_run_metrics` deletes them with their runs, and a batch holds a key-share
lock on its run row so that it cannot commit points into a run being deleted.

Locks are always taken in one order, so concurrent batches for the same run wait on each
other but never deadlock: the run row (key share), idempotency key, points (sorted by series
and step), rollups (sorted by series, level and bucket), series rows (sorted by id), then the
run row's update. The COPY path alone does not sort its points (sorting would cost more
than the COPY saves): batches that meet on the same new points are rare (retries of one
batch while it is still running), and should two deadlock, the loser rolls back to its
savepoint and tries again, a COPY through the sorted INSERT.
"""

import struct
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy import ColumnElement, and_, delete, func, literal, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.runs import load_run
from crucible.db.tables import IdempotencyRecord, MetricPoint, MetricRollup, MetricSeries, Run
from crucible.domain.downsample import (
    MIN_POINTS,
    ROLLUP_LEVELS,
    Point,
    Rollup,
    coarser_rollups,
    minmax_groups,
    minmax_indices,
    minmax_rollup_points,
    rollup_level,
    rollups_by_bucket,
)
from crucible.domain.enums import Role
from crucible.domain.errors import Conflict, InvalidInput, NotFound
from crucible.domain.json_values import MAX_INT64
from crucible.schemas.metrics import (
    IngestResult,
    MetricBatch,
    MetricHistory,
    MetricKeyPublic,
    MetricKeysPublic,
    MetricSeriesPublic,
)

SQL_DOWNSAMPLE_MIN_POINTS = 50_000
"""Above this many points a Postgres series that rollups cannot serve is bucketed in SQL
rather than fetched whole."""


def idempotency_scope(run_id: int) -> str:
    return f"metrics:{run_id}"


def _on_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _driver(session: Session) -> "psycopg.Connection[Any]":
    """The psycopg connection under the session's transaction, for what SQLAlchemy cannot
    pass through: COPY and binary-format arrays, several times cheaper than rows or text."""
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
        columns = cls(
            keys=[p["key"] for p in points],
            steps=[p["step"] for p in points],
            values=[p["value"] for p in points],
            times=[p.get("time") for p in points],
        )
        for row in batch.rows:
            count = len(row["values"])
            columns.keys.extend(row["values"].keys())
            columns.values.extend(row["values"].values())
            columns.steps.extend([row["step"]] * count)
            columns.times.extend([row.get("time")] * count)
        return columns


@dataclass(frozen=True)
class _SeriesGain:
    """What one batch added to one series: the new-point count and its highest new step."""

    series_id: int
    added: int
    top_step: int
    top_value: float


@dataclass(frozen=True)
class _Series:
    """A series the batch writes to, and its highest step stored so far."""

    id: int
    last_step: int | None


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
    _hold_run(session, run.id)
    if idempotency_key is not None:
        replayed = _claim_key(session, run.id, idempotency_key, request_digest)
        if replayed is not None:
            return replayed

    columns = _Columns.of(batch)
    gains: list[_SeriesGain] = []
    if columns.keys:
        series = _intern_keys(session, run.id, sorted(set(columns.keys)))
        insert = _insert_points_postgres if _on_postgres(session) else _insert_points_portable
        gains = insert(session, series, columns, time.time())
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
    result = IngestResult(accepted=accepted, duplicates=batch.point_count - accepted)
    if idempotency_key is not None:
        _record_result(session, run.id, idempotency_key, request_digest, result)
    return result


def _hold_run(session: Session, run_id: int) -> None:
    """Key-share lock the run row until commit: what the points' foreign key used to do for
    each point, once per batch. A deletion of the run waits for this batch (and then deletes
    its points), or this batch waits for the deletion and finds no run."""
    held = session.scalar(select(Run.id).where(Run.id == run_id).with_for_update(key_share=True))
    if held is None:
        raise NotFound("run", run_id)


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


def _intern_keys(session: Session, run_id: int, keys: list[str]) -> dict[str, _Series]:
    """The series of `keys` (sorted), creating the missing ones; safe against a race."""
    query = select(MetricSeries.key, MetricSeries.id, MetricSeries.last_step).where(
        MetricSeries.run_id == run_id, MetricSeries.key.in_(keys)
    )
    found = {key: _Series(series_id, last) for key, series_id, last in session.execute(query)}
    missing = [k for k in keys if k not in found]
    if missing:
        insert = pg_insert if _on_postgres(session) else sqlite_insert
        session.execute(
            insert(MetricSeries).on_conflict_do_nothing(),
            [{"run_id": run_id, "key": k, "point_count": 0} for k in missing],
        )
        again = query.where(MetricSeries.key.in_(missing))
        found.update({key: _Series(sid, last) for key, sid, last in session.execute(again)})
    return found


# Postgres: a batch whose steps all lie beyond the last stored step of each of its series
# (training logging forward, the common case) is COPYed, about twice as fast as the INSERT
# below. A point stored meanwhile by a concurrent batch, or a (key, step) repeated inside
# the batch, makes the COPY fail; it is then rolled back to a savepoint and the batch goes
# through the INSERT.
_PG_COPY_POINTS = (
    "COPY metric_points (series_id, step, value, wall_time) FROM STDIN (FORMAT BINARY)"
)

# ON CONFLICT DO NOTHING also drops a (key, step) repeated inside the batch, and sorting by
# position makes its first occurrence the one kept. Sorting by (series, step) first makes
# concurrent overlapping batches take the primary-key locks in one order. RETURNING hands
# exactly the stored points to the rollups. Arrays are unnested in the select list: in
# FROM, unnest() first copies each array into a tuplestore, which costs four times as much.
_PG_INSERT_POINTS_CTE = """
src AS (
    INSERT INTO metric_points (series_id, step, value, wall_time)
    SELECT series_id, step, value, wall_time FROM (
        SELECT unnest(%(series)b) AS series_id, unnest(%(steps)b) AS step,
            unnest(%(values)b) AS value, unnest(%(times)b) AS wall_time,
            generate_series(1, %(count)s) AS position
    ) AS u
    ORDER BY series_id, step, position
    ON CONFLICT DO NOTHING
    RETURNING series_id, step, value, wall_time
)"""

_PG_COPIED_POINTS_CTE = """
src AS (
    SELECT unnest(%(series)b) AS series_id, unnest(%(steps)b) AS step,
        unnest(%(values)b) AS value, unnest(%(times)b) AS wall_time
)"""

_ROLLUP_COLUMNS = (
    "series_id, level, bucket, point_count, first_step, first_value, first_time, last_step, "
    "last_value, last_time, min_step, min_value, min_time, max_step, max_value, max_time"
)


def _merge_clause() -> str:
    """ON CONFLICT clause folding a bucket's new points into its stored rollup (the rule of
    `merge_rollups`); valid on Postgres and SQLite."""
    old, new = "metric_rollups", "excluded"
    takes = {
        "first": f"{new}.first_step < {old}.first_step",
        "last": f"{new}.last_step > {old}.last_step",
        "min": f"{new}.min_value < {old}.min_value OR "
        f"({new}.min_value = {old}.min_value AND {new}.min_step < {old}.min_step)",
        "max": f"{new}.max_value > {old}.max_value OR "
        f"({new}.max_value = {old}.max_value AND {new}.max_step < {old}.max_step)",
    }
    sets = [f"point_count = {old}.point_count + {new}.point_count"]
    for which, condition in takes.items():
        sets.extend(
            f"{column} = CASE WHEN {condition} THEN {new}.{column} ELSE {old}.{column} END"
            for column in (f"{which}_step", f"{which}_value", f"{which}_time")
        )
    return "ON CONFLICT (series_id, level, bucket) DO UPDATE SET\n    " + ",\n    ".join(sets)


_MERGE_ROLLUPS = _merge_clause()


def _pg_rollups_sql(source_cte: str) -> str:
    """One statement: the CTE `src` (series_id, step, value, wall_time: the points just
    stored), its rollups at every level upserted in lock order, and per series the count
    stored and the highest step with its value.

    The finest level is summarised from the points, each coarser one from the level below.
    `min(ARRAY[value, offset, time])` carries the step and time of the lowest value along
    with it; offsets within a bucket (under 2**16) are exact as float8, whatever the step.
    Built once, at import, from constants only (hence the `noqa: S608`)."""
    ctes = [source_cte]
    previous: int | None = None
    for level in ROLLUP_LEVELS:
        mask = (1 << level) - 1
        if previous is None:
            ctes.append(f"""
p{level} AS (
    SELECT series_id, step >> {level} AS bucket, count(*) AS n,
        min(ARRAY[(step & {mask})::float8, value, wall_time]) AS f,
        max(ARRAY[(step & {mask})::float8, value, wall_time]) AS l,
        min(ARRAY[value, (step & {mask})::float8, wall_time]) AS lo,
        max(ARRAY[value, -(step & {mask})::float8, wall_time]) AS hi
    FROM src GROUP BY 1, 2
)""")  # noqa: S608
        else:
            ctes.append(f"""
p{level} AS (
    SELECT series_id, bucket >> {level - previous} AS bucket, sum(point_count)::bigint AS n,
        min(ARRAY[(first_step & {mask})::float8, first_value, first_time]) AS f,
        max(ARRAY[(last_step & {mask})::float8, last_value, last_time]) AS l,
        min(ARRAY[min_value, (min_step & {mask})::float8, min_time]) AS lo,
        max(ARRAY[max_value, -(max_step & {mask})::float8, max_time]) AS hi
    FROM r{previous} GROUP BY 1, 2
)""")  # noqa: S608
        ctes.append(f"""
r{level} AS (
    SELECT series_id, {level}::smallint AS level, bucket, n AS point_count,
        (bucket << {level}) + f[1]::bigint AS first_step, f[2] AS first_value,
        f[3] AS first_time,
        (bucket << {level}) + l[1]::bigint AS last_step, l[2] AS last_value,
        l[3] AS last_time,
        (bucket << {level}) + lo[2]::bigint AS min_step, lo[1] AS min_value,
        lo[3] AS min_time,
        (bucket << {level}) - hi[2]::bigint AS max_step, hi[1] AS max_value,
        hi[3] AS max_time
    FROM p{level}
)""")  # noqa: S608
        previous = level
    every_level = " UNION ALL ".join(
        f"SELECT * FROM r{level}"  # noqa: S608
        for level in ROLLUP_LEVELS
    )
    ctes.append(f"""
written AS (
    INSERT INTO metric_rollups ({_ROLLUP_COLUMNS})
    SELECT * FROM ({every_level}) AS r ORDER BY series_id, level, bucket
    {_MERGE_ROLLUPS}
)""")  # noqa: S608
    return f"""
WITH {",".join(ctes)}
SELECT DISTINCT ON (series_id) series_id,
    (sum(point_count) OVER (PARTITION BY series_id))::bigint, last_step, last_value
FROM r{previous} ORDER BY series_id, bucket DESC
"""  # noqa: S608


_PG_INSERT_POINTS = _pg_rollups_sql(_PG_INSERT_POINTS_CTE)
_PG_ROLLUP_COPIED = _pg_rollups_sql(_PG_COPIED_POINTS_CTE)


def _insert_points_postgres(
    session: Session, series: dict[str, _Series], columns: _Columns, now: float
) -> list[_SeriesGain]:
    ids = {key: s.id for key, s in series.items()}
    series_ids = _big_endian(array("q", [ids[k] for k in columns.keys]))
    steps = _big_endian(array("q", columns.steps))
    values = _big_endian(array("d", columns.values))
    times = _big_endian(array("d", [now if t is None else t for t in columns.times]))
    arrays = {
        "series": _Int8Array(series_ids),
        "steps": _Int8Array(steps),
        "values": _Float8Array(values),
        "times": _Float8Array(times),
    }
    last_stored = max(-1 if s.last_step is None else s.last_step for s in series.values())
    rows = (series_ids, steps, values, times)
    with _driver(session).cursor() as cursor:
        cursor.adapters.register_dumper(_Int8Array, _Int8ArrayDumper)
        cursor.adapters.register_dumper(_Float8Array, _Float8ArrayDumper)

        def copy_points() -> None:
            with cursor.copy(_PG_COPY_POINTS) as copy:
                copy.write(_copy_data(rows))

        gains: list[_SeriesGain] = []

        def insert_points() -> None:
            cursor.execute(_PG_INSERT_POINTS, arrays | {"count": len(columns.steps)})
            gains[:] = [_SeriesGain(*row) for row in cursor.fetchall()]

        fresh = min(columns.steps) > last_stored
        if fresh and _under_savepoint(cursor, copy_points, _COPY_FAILURES):
            cursor.execute(_PG_ROLLUP_COPIED, arrays)
            return [_SeriesGain(*row) for row in cursor.fetchall()]
        if not any(
            _under_savepoint(cursor, insert_points, (psycopg.errors.DeadlockDetected,))
            for _ in range(_DEADLOCK_RETRIES)
        ):
            insert_points()  # once more, and whatever happens happens
        return gains


# A point stored meanwhile (by a concurrent batch) or a (key, step) repeated in the batch;
# or a deadlock with a concurrent batch, which COPY (not sorting its points) can get into.
_COPY_FAILURES = (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected)
# The sorted INSERT can still be the one a deadlock with an unsorted COPY aborts: the COPY
# then goes on and the INSERT, tried again, waits for it.
_DEADLOCK_RETRIES = 3


def _under_savepoint(
    cursor: "psycopg.Cursor[Any]",
    action: Callable[[], None],
    failures: tuple[type[psycopg.Error], ...],
) -> bool:
    """Run `action`; False, with nothing it did left, if it raised one of `failures`."""
    cursor.execute("SAVEPOINT metric_points")
    try:
        action()
    except failures:
        cursor.execute("ROLLBACK TO SAVEPOINT metric_points")
        return False
    cursor.execute("RELEASE SAVEPOINT metric_points")
    return True


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, no flags, no extension
_COPY_TRAILER = b"\xff\xff"


def _copy_data(columns: Sequence[bytes]) -> bytes:
    """Binary COPY data for rows of 8-byte fields, from each column's big-endian values:
    per row a field count, then per field its length (8) and bytes, laid in with strided
    copies rather than a Python loop over the rows."""
    n = len(columns[0]) // 8
    width = 2 + 12 * len(columns)
    end = len(_COPY_HEADER) + width * n
    out = bytearray(end + len(_COPY_TRAILER))
    out[: len(_COPY_HEADER)] = _COPY_HEADER
    out[len(_COPY_HEADER) + 1 : end : width] = bytes([len(columns)]) * n
    for field, data in enumerate(columns):
        start = len(_COPY_HEADER) + 2 + 12 * field
        out[start + 3 : end : width] = b"\x08" * n
        for byte in range(8):
            out[start + 4 + byte : end : width] = data[byte::8]
    out[end:] = _COPY_TRAILER
    return bytes(out)


_INT8_OID, _FLOAT8_OID = 20, 701
_INT8_ARRAY_OID, _FLOAT8_ARRAY_OID = 1016, 1022


def _big_endian(items: "array[Any]") -> bytes:
    """The items' 8-byte values in network order, as Postgres' binary formats want them."""
    if sys.byteorder == "little":
        items.byteswap()
    return items.tobytes()


class _Int8Array(bytes):
    """Big-endian int64 values as Postgres' binary bigint[]. psycopg's own list dumper
    visits every element in Python, which costs more than the whole INSERT."""

    def __new__(cls, data: bytes) -> "_Int8Array":
        return super().__new__(cls, _binary_array(data, _INT8_OID))


class _Float8Array(bytes):
    """Big-endian float64 values as Postgres' binary float8[]."""

    def __new__(cls, data: bytes) -> "_Float8Array":
        return super().__new__(cls, _binary_array(data, _FLOAT8_OID))


def _binary_array(data: bytes, element_oid: int) -> bytes:
    """One dimension, no NULLs: a 20-byte header, then per element its length (8) and its
    big-endian bytes, laid in with strided copies rather than a Python loop."""
    n = len(data) // 8
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
    session: Session, series: dict[str, _Series], columns: _Columns, now: float
) -> list[_SeriesGain]:
    # Row by row in batch order, so a (key, step) repeated in the batch keeps its first value.
    ids = {key: s.id for key, s in series.items()}
    params = [
        {"series_id": ids[k], "step": st, "value": v, "wall_time": now if t is None else t}
        for k, st, v, t in zip(
            columns.keys, columns.steps, columns.values, columns.times, strict=True
        )
    ]
    added = session.execute(
        sqlite_insert(MetricPoint)
        .on_conflict_do_nothing()
        .returning(
            MetricPoint.series_id, MetricPoint.step, MetricPoint.value, MetricPoint.wall_time
        ),
        params,
    ).all()
    stored: dict[int, list[Point]] = {}
    for series_id, *point in added:
        stored.setdefault(series_id, []).append(cast(Point, tuple(point)))
    rows: list[dict[str, Any]] = []
    gains = []
    for series_id in sorted(stored):
        level_rows = rollups_by_bucket(stored[series_id], ROLLUP_LEVELS[0])
        previous = ROLLUP_LEVELS[0]
        for level in ROLLUP_LEVELS:
            if level != previous:
                level_rows = coarser_rollups(level_rows, level - previous)
                previous = level
            rows.extend(
                {"series_id": series_id, "level": level, "bucket": bucket, **rollup._asdict()}
                for bucket, rollup in level_rows.items()
            )
        top = level_rows[max(level_rows)]
        gains.append(_SeriesGain(series_id, len(stored[series_id]), top.last_step, top.last_value))
    if rows:
        session.execute(_SQLITE_UPSERT_ROLLUPS, rows)
    return gains


_SQLITE_UPSERT_ROLLUPS = text(
    f"INSERT INTO metric_rollups ({_ROLLUP_COLUMNS}) VALUES ("  # noqa: S608
    + ", ".join(f":{column.strip()}" for column in _ROLLUP_COLUMNS.split(","))
    + f")\n{_MERGE_ROLLUPS}"
)

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


# --- deletion -------------------------------------------------------------------------------


def delete_run_metrics(session: Session, runs: ColumnElement[bool]) -> None:
    """Delete the points and rollups of the runs matching `runs` (a condition on `Run`),
    which the caller is about to delete in this transaction: nothing cascades to them.

    The runs are locked first (by id), so a batch being stored in one of them either commits
    before this (and its points are deleted here) or waits and then finds the run gone."""
    locked = session.scalars(select(Run.id).where(runs).order_by(Run.id).with_for_update())
    if not locked.all():
        return
    series = select(MetricSeries.id).join(Run, Run.id == MetricSeries.run_id).where(runs)
    session.execute(delete(MetricPoint).where(MetricPoint.series_id.in_(series)))
    session.execute(delete(MetricRollup).where(MetricRollup.series_id.in_(series)))


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


_NO_POINTS = _Points([], [], [])


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


_PG_READ_SETTINGS = """SELECT set_config('jit', 'off', true),
    set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)"""


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
        select(MetricSeries.id, MetricSeries.key, MetricSeries.point_count, MetricSeries.last_step)
        .where(MetricSeries.run_id == run.id, MetricSeries.point_count > 0)
        .order_by(MetricSeries.key)
    )
    if keys is not None:
        query = query.where(MetricSeries.key.in_(keys))
    on_postgres = _on_postgres(session)
    if on_postgres:
        # JIT compilation would start at ~400,000 rows and cost more than it saves. Every
        # read here is of one series, by the primary key's prefix: where the points table
        # is small, or one series a large part of it, the planner would otherwise pick a
        # (parallel) scan of the whole table and a sort, several times slower.
        session.execute(text(_PG_READ_SETTINGS))
    series: list[MetricSeriesPublic] = []
    for series_id, key, point_count, last_step in session.execute(query).all():
        stored = _Stored(series_id, point_count, MAX_INT64 if last_step is None else last_step)
        points, total = _read_series(session, stored, low, high, max_points)
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


@dataclass(frozen=True)
class _Stored:
    """What the series row says of its points."""

    id: int
    point_count: int
    last_step: int


def _read_series(
    session: Session, series: _Stored, low: int, high: int, max_points: int | None
) -> tuple[_Points, int]:
    """The series' points in [low, high] and how many there are, cut to `max_points`: from
    the rollups when they can serve the cut, else from the points."""
    high = min(high, series.last_step)  # nothing lies beyond it; no need to look there
    on_postgres = _on_postgres(session)
    fetch = _fetch_postgres if on_postgres else _fetch_portable
    if max_points is None or series.point_count <= max_points:
        if on_postgres and series.point_count > _DENSE_CHECK_MIN_POINTS:
            points = _fetch_postgres_maybe_dense(session, series, low, high)
        else:
            points = fetch(session, series.id, low, high)
        return points, len(points.steps)
    from_rollups = _downsample_rollups(session, series.id, low, high, max_points)
    if from_rollups is not None:
        return from_rollups
    if on_postgres and series.point_count > SQL_DOWNSAMPLE_MIN_POINTS:
        return _downsample_postgres(session, series.id, low, high, max_points)
    points = fetch(session, series.id, low, high)
    total = len(points.steps)
    if total > max_points:
        points = points.pick(minmax_indices(points.values, max_points))
    return points, total


def _fetch_portable(session: Session, series_id: int, low: int, high: int) -> _Points:
    rows = session.execute(
        select(MetricPoint.step, MetricPoint.value, MetricPoint.wall_time)
        .where(MetricPoint.series_id == series_id, MetricPoint.step.between(low, high))
        .order_by(MetricPoint.step)
    ).all()
    if not rows:
        return _NO_POINTS
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
        return _NO_POINTS
    return _Points(row[0], row[1], row[2])


# A series with a point at every step from its first to its last (a curve logged at every
# step, the common case) needs no step array: building and decoding it is a third of a
# whole-series read. Every range of such a series is as dense.
_DENSE_CHECK_MIN_POINTS = 10_000

_PG_FIRST_STEP = "SELECT min(step) FROM metric_points WHERE series_id = %(series)s"

_PG_DENSE_ARRAYS = """
SELECT array_agg(value), array_agg(wall_time) FROM (
    SELECT value, wall_time FROM metric_points
    WHERE series_id = %(series)s AND step BETWEEN %(low)s AND %(high)s
    ORDER BY step
) AS p
"""


def _fetch_postgres_maybe_dense(session: Session, series: _Stored, low: int, high: int) -> _Points:
    """`high` must not exceed the series' last step."""
    params = {"series": series.id, "low": low, "high": high}
    with _driver(session).cursor(binary=True) as cursor:
        cursor.execute(_PG_FIRST_STEP, params)
        first = cast(tuple[int | None], cursor.fetchone())[0]
        if first is None or series.last_step - first + 1 != series.point_count:
            return _fetch_postgres(session, series.id, low, high)
        cursor.execute(_PG_DENSE_ARRAYS, params)
        values, times = cast(tuple[Any, ...], cursor.fetchone())
    start = max(low, first)
    if values is None or start > high:
        return _NO_POINTS
    # Every step from `start` to `high` is there. One more (stored below the first step
    # since the series row was read) means the points are no longer dense: read them again.
    if len(values) != high - start + 1:
        return _fetch_postgres(session, series.id, low, high)
    return _Points(list(range(start, high + 1)), values, times)


# --- downsampling from rollups --------------------------------------------------------------


def _downsample_rollups(
    session: Session, series_id: int, low: int, high: int, max_points: int
) -> tuple[_Points, int] | None:
    """At most `max_points` of the series' points in [low, high], chosen from its rollups at
    the coarsest level that has at least one bucket per output bucket; None when no level
    is that fine. The range is covered by that level's whole buckets, its ragged ends by
    finer levels' and, under the finest bucket, by the points themselves."""
    level = rollup_level(_bucket_counts(session, series_id, low, high, max_points), max_points)
    if level is None:
        return None
    pieces: list[tuple[int, int, int]] = []
    ragged: list[tuple[int, int]] = []
    _cover(low, high, [lv for lv in reversed(ROLLUP_LEVELS) if lv <= level], pieces, ragged)
    if _on_postgres(session):
        total, picked = _pick_from_rollups_postgres(session, series_id, pieces, ragged, max_points)
    else:
        rows = _rollups_in(session, series_id, pieces)
        rows += _points_as_rollups(session, series_id, ragged)
        rows.sort(key=lambda row: row.first_step)
        total = sum(row.point_count for row in rows)
        kept = minmax_rollup_points(rows, max_points) if total > max_points else []
        picked = _Points(*(list(column) for column in zip(*kept, strict=True))) if kept else None
    if picked is None or total <= max_points:
        fetch = _fetch_postgres if _on_postgres(session) else _fetch_portable
        points = fetch(session, series_id, low, high)
        return points, len(points.steps)
    return picked, total


# `minmax_rollup_points` in SQL: the pieces' rollups and the ragged ends' points, grouped by
# where their first step falls, each group keeping its lowest and highest point (the earliest
# step wins a tie), with the first and the last point. ARRAY[value, step - first, time] makes
# min() and max() carry the step and time along, in one hash aggregate rather than a sort per
# extreme; the step is split in two parts, each exact as float8, whatever the range.
_PG_PICK_FROM_ROLLUPS = """
WITH summaries AS (
    SELECT r.first_step, r.first_value, r.first_time, r.last_step, r.last_value, r.last_time,
        r.min_step, r.min_value, r.min_time, r.max_step, r.max_value, r.max_time,
        r.point_count
    FROM unnest(%(levels)s::int2[], %(firsts)s::int8[], %(lasts)s::int8[])
        AS p(level, first, last)
    JOIN metric_rollups AS r ON r.series_id = %(series)s::int8 AND r.level = p.level
        AND r.bucket BETWEEN p.first AND p.last
    UNION ALL
    SELECT m.step, m.value, m.wall_time, m.step, m.value, m.wall_time,
        m.step, m.value, m.wall_time, m.step, m.value, m.wall_time, 1
    FROM unnest(%(lows)s::int8[], %(highs)s::int8[]) AS q(low, high)
    JOIN metric_points AS m ON m.series_id = %(series)s::int8
        AND m.step BETWEEN q.low AND q.high
), bounds AS (
    SELECT min(first_step) AS first, max(last_step) AS last, sum(point_count)::bigint AS total
    FROM summaries
), grouped AS (
    SELECT div((s.first_step - b.first)::numeric * %(groups)s, b.last - b.first + 1) AS g,
        min(ARRAY[s.min_value, ((s.min_step - b.first) >> 26)::float8,
            ((s.min_step - b.first) & 67108863)::float8, s.min_time]) AS lo,
        max(ARRAY[s.max_value, -((s.max_step - b.first) >> 26)::float8,
            -((s.max_step - b.first) & 67108863)::float8, s.max_time]) AS hi
    FROM summaries AS s, bounds AS b GROUP BY 1
), kept AS (
    SELECT first_step AS step, first_value AS value, first_time AS wall_time
    FROM summaries, bounds WHERE first_step = bounds.first
    UNION ALL
    SELECT last_step, last_value, last_time FROM summaries, bounds WHERE last_step = bounds.last
    UNION ALL
    SELECT b.first + (lo[2]::bigint << 26) + lo[3]::bigint, lo[1], lo[4] FROM grouped, bounds AS b
    UNION ALL
    SELECT b.first + ((-hi[2])::bigint << 26) + (-hi[3])::bigint, hi[1], hi[4]
    FROM grouped, bounds AS b
)
SELECT (SELECT total FROM bounds), array_agg(step), array_agg(value), array_agg(wall_time)
FROM (SELECT DISTINCT ON (step) step, value, wall_time FROM kept ORDER BY step) AS picked
"""


def _pick_from_rollups_postgres(
    session: Session,
    series_id: int,
    pieces: Sequence[tuple[int, int, int]],
    ragged: Sequence[tuple[int, int]],
    max_points: int,
) -> tuple[int, _Points | None]:
    params = {
        "series": series_id,
        "levels": [level for level, _, _ in pieces],
        "firsts": [first for _, first, _ in pieces],
        "lasts": [last for _, _, last in pieces],
        "lows": [low for low, _ in ragged],
        "highs": [high for _, high in ragged],
        "groups": minmax_groups(max_points),
    }
    with _driver(session).cursor(binary=True) as cursor:
        cursor.execute(_PG_PICK_FROM_ROLLUPS, params)
        total, steps, values, times = cast(tuple[Any, ...], cursor.fetchone())
    if not total:
        return 0, None
    return total, _Points(steps, values, times)


def _whole_buckets(low: int, high: int, level: int) -> tuple[int, int] | None:
    """The first and last bucket of `level` lying wholly inside [low, high], if any."""
    width = 1 << level
    first, last = -(-low // width), (high + 1) // width - 1
    return (first, last) if first <= last else None


def _cover(
    low: int,
    high: int,
    levels: list[int],
    pieces: list[tuple[int, int, int]],
    ragged: list[tuple[int, int]],
) -> None:
    """Split [low, high] into whole buckets, coarsest level first (`pieces`: level, first
    and last bucket), and the step ranges no bucket fits in (`ragged`)."""
    if low > high:
        return
    if not levels:
        ragged.append((low, high))
        return
    level, finer = levels[0], levels[1:]
    span = _whole_buckets(low, high, level)
    if span is None:
        _cover(low, high, finer, pieces, ragged)
        return
    first, last = span
    pieces.append((level, first, last))
    _cover(low, (first << level) - 1, finer, pieces, ragged)
    _cover((last + 1) << level, high, finer, pieces, ragged)


def _bucket_counts(
    session: Session, series_id: int, low: int, high: int, max_points: int
) -> dict[int, int]:
    """Level -> the series' whole buckets in [low, high], counted up to the output buckets
    of `max_points`, coarsest level first and only until one has that many: a finer level
    never has fewer. A level whose span holds too few buckets is not counted at all."""
    enough = minmax_groups(max_points)
    counts: dict[int, int] = {}
    for level in reversed(ROLLUP_LEVELS):
        span = _whole_buckets(low, high, level)
        if span is None or span[1] - span[0] + 1 < enough:
            continue
        head = (
            select(literal(1))
            .where(
                MetricRollup.series_id == series_id,
                MetricRollup.level == level,
                MetricRollup.bucket.between(*span),
            )
            .limit(enough)
            .subquery()
        )
        counts[level] = session.scalar(select(func.count()).select_from(head)) or 0
        if counts[level] >= enough:
            break
    return counts


_ROLLUP_FIELDS = tuple(getattr(MetricRollup, field) for field in Rollup._fields)


def _rollups_in(
    session: Session, series_id: int, pieces: Sequence[tuple[int, int, int]]
) -> list[Rollup]:
    """The rollups of `pieces` (level, first bucket, last bucket)."""
    if not pieces:
        return []
    ranges = (
        and_(MetricRollup.level == level, MetricRollup.bucket.between(first, last))
        for level, first, last in pieces
    )
    query = select(*_ROLLUP_FIELDS).where(MetricRollup.series_id == series_id, or_(*ranges))
    return [Rollup(*row) for row in session.execute(query)]


def _points_as_rollups(
    session: Session, series_id: int, ranges: Sequence[tuple[int, int]]
) -> list[Rollup]:
    """The points in `ranges` (each under the finest bucket), each as a rollup of one."""
    if not ranges:
        return []
    rows = session.execute(
        select(MetricPoint.step, MetricPoint.value, MetricPoint.wall_time).where(
            MetricPoint.series_id == series_id,
            or_(*(MetricPoint.step.between(lo, hi) for lo, hi in ranges)),
        )
    )
    return [Rollup(1, *point, *point, *point, *point) for point in rows]


# --- downsampling from the points (what rollups cannot serve) -------------------------------

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
SELECT array_agg(step), array_agg(value), array_agg(wall_time) FROM (
    SELECT step, value, wall_time FROM metric_points
    WHERE series_id = %(series)s AND step = ANY(%(steps)s) ORDER BY step
) AS p
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
            return _NO_POINTS, 0
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
        cursor.adapters.register_dumper(_Int8Array, _Int8ArrayDumper)
        wanted = _Int8Array(_big_endian(array("q", sorted(keep))))
        cursor.execute(_PG_POINTS_AT, {"series": series_id, "steps": wanted})
        row = cast(tuple[Any, ...], cursor.fetchone())
    return _Points(*row), total
