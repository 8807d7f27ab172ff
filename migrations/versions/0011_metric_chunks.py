"""metric chunks: a series' points stored as packed arrays, one row per series per batch

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:00:00.000000

A row per point made a 1,000-point batch of 10 keys cost the database 1,000 rows, and the
rollups kept for downsampled reads cost more rows again. A chunk holds the points one batch
added to one series, their steps, values and times packed as big-endian int64 and float64
arrays (Postgres' `int8send`/`float8send` byte order), with a summary of them beside: the
summaries serve downsampled reads, so the rollups go too.

The points already stored become one chunk per series per 512-step bucket, at most the 512
points a chunk holds on ingest (in SQL on Postgres; in Python on SQLite, which cannot build
the arrays). Points of deleted series, which metric_points (without a foreign key) may still
hold, are left behind.
"""

import importlib.util
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Steps per chunk made of the stored points (chunk = step >> BUCKET_BITS).
BUCKET_BITS = 9
# Rows per INSERT of the conversions done in Python.
INSERT_BATCH = 1_000
CHUNK_COLUMNS = (
    "series_id",
    "first_step",
    "last_step",
    "point_count",
    "steps",
    "values",
    "times",
    "first_value",
    "first_time",
    "last_value",
    "last_time",
    "min_step",
    "min_value",
    "min_time",
    "max_step",
    "max_value",
    "max_time",
)

Point = tuple[int, float, float]
"""(step, value, wall time)"""


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("max_chunk_span", sa.BigInteger(), server_default="0", nullable=False)
        )
    # The model has no server default. Dropped before metric_chunks exists: on SQLite this
    # copies metric_series, and dropping the old copy would cascade to the chunks.
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.alter_column("max_chunk_span", server_default=None)
    op.create_table(
        "metric_chunks",
        sa.Column("series_id", _big_id(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("point_count", sa.Integer(), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=True),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.Column("times", sa.LargeBinary(), nullable=False),
        sa.Column("first_value", sa.Float(), nullable=False),
        sa.Column("first_time", sa.Float(), nullable=False),
        sa.Column("last_value", sa.Float(), nullable=False),
        sa.Column("last_time", sa.Float(), nullable=False),
        sa.Column("min_step", sa.BigInteger(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=False),
        sa.Column("min_time", sa.Float(), nullable=False),
        sa.Column("max_step", sa.BigInteger(), nullable=False),
        sa.Column("max_value", sa.Float(), nullable=False),
        sa.Column("max_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["metric_series.id"],
            name=op.f("fk_metric_chunks_series_id_metric_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "first_step", name=op.f("pk_metric_chunks")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRES_CHUNKS)
    else:
        _insert_chunks_of_points()
    op.execute(
        "UPDATE metric_series SET max_chunk_span = coalesce(("
        "SELECT max(last_step - first_step) FROM metric_chunks "
        "WHERE metric_chunks.series_id = metric_series.id), 0)"
    )
    op.drop_table("metric_rollups")
    op.drop_table("metric_points")


def downgrade() -> None:
    op.create_table(
        "metric_points",
        sa.Column("series_id", _big_id(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("wall_time", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "step", name=op.f("pk_metric_points")),
    )
    op.create_table(
        "metric_rollups",
        sa.Column("series_id", _big_id(), autoincrement=False, nullable=False),
        sa.Column("level", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("bucket", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("point_count", sa.BigInteger(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("first_value", sa.Float(), nullable=False),
        sa.Column("first_time", sa.Float(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("last_value", sa.Float(), nullable=False),
        sa.Column("last_time", sa.Float(), nullable=False),
        sa.Column("min_step", sa.BigInteger(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=False),
        sa.Column("min_time", sa.Float(), nullable=False),
        sa.Column("max_step", sa.BigInteger(), nullable=False),
        sa.Column("max_value", sa.Float(), nullable=False),
        sa.Column("max_time", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "level", "bucket", name=op.f("pk_metric_rollups")),
    )
    _insert_points_of_chunks()
    # The rollups exactly as revision 0005 computes them from the points.
    rollups = _revision_0005()
    postgres = op.get_bind().dialect.name == "postgresql"
    summary = rollups._postgres_summary if postgres else rollups._portable_summary
    previous: int | None = None
    for level in rollups.LEVELS:
        op.execute(f"INSERT INTO metric_rollups ({rollups.COLUMNS})\n{summary(level, previous)}")
        previous = level
    op.drop_table("metric_chunks")
    # After the chunks are gone: on SQLite this copies metric_series (see upgrade()).
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.drop_column("max_chunk_span")


# One pass over the points of each (series, bucket): string_agg packs the arrays, and
# min/max over ARRAY[...] carry the step and time of the first, last, lowest and highest
# point along with it (as in revision 0005; offsets within a bucket are exact as float8).
# The lowest sorts by (value, offset) and the highest by (value, -offset): the earliest
# step wins a tie either way.
_BUCKET_MASK = (1 << BUCKET_BITS) - 1
_POSTGRES_CHUNKS = f"""
INSERT INTO metric_chunks ({", ".join(f'"{column}"' for column in CHUNK_COLUMNS)})
SELECT series_id, first_step, last_step, n,
    CASE WHEN last_step - first_step + 1 = n THEN NULL ELSE steps END, vals, times,
    f[2], f[3], l[2], l[3],
    start + lo[2]::bigint, lo[1], lo[3], start - hi[2]::bigint, hi[1], hi[3]
FROM (
    SELECT series_id, (step >> {BUCKET_BITS}) << {BUCKET_BITS} AS start,
        min(step) AS first_step, max(step) AS last_step, count(*)::integer AS n,
        string_agg(int8send(step), ''::bytea ORDER BY step) AS steps,
        string_agg(float8send(value), ''::bytea ORDER BY step) AS vals,
        string_agg(float8send(wall_time), ''::bytea ORDER BY step) AS times,
        min(ARRAY[(step & {_BUCKET_MASK})::float8, value, wall_time]) AS f,
        max(ARRAY[(step & {_BUCKET_MASK})::float8, value, wall_time]) AS l,
        min(ARRAY[value, (step & {_BUCKET_MASK})::float8, wall_time]) AS lo,
        max(ARRAY[value, -(step & {_BUCKET_MASK})::float8, wall_time]) AS hi
    FROM metric_points
    WHERE series_id IN (SELECT id FROM metric_series)
    GROUP BY series_id, step >> {BUCKET_BITS}
) AS buckets
"""  # noqa: S608


def _insert_chunks_of_points() -> None:
    """The chunks of the stored points, packed here: SQLite has no functions to build them."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT series_id, step, value, wall_time FROM metric_points "
            "WHERE series_id IN (SELECT id FROM metric_series) ORDER BY series_id, step"
        )
    )
    _insert_batched("metric_chunks", CHUNK_COLUMNS, _chunks(rows))


def _chunks(rows: Iterable[Sequence[Any]]) -> Iterator[dict[str, Any]]:
    """Rows of metric_chunks from points ordered by series and step."""
    key: tuple[int, int] | None = None
    points: list[Point] = []
    for series_id, step, value, wall_time in rows:
        here = (series_id, step >> BUCKET_BITS)
        if here != key:
            if key is not None:
                yield _chunk(key[0], points)
            key, points = here, []
        points.append((step, value, wall_time))
    if key is not None:
        yield _chunk(key[0], points)


def _chunk(series_id: int, points: list[Point]) -> dict[str, Any]:
    """The row of some points of one series, in step order (distinct steps, at least one)."""
    count = len(points)
    steps = [point[0] for point in points]
    first, last = points[0], points[-1]
    low = min(points, key=lambda point: point[1])  # the first (earliest) of a tie wins
    high = max(points, key=lambda point: point[1])
    dense = last[0] - first[0] + 1 == count
    return {
        "series_id": series_id,
        "first_step": first[0],
        "last_step": last[0],
        "point_count": count,
        "steps": None if dense else struct.pack(f">{count}q", *steps),
        "values": struct.pack(f">{count}d", *(point[1] for point in points)),
        "times": struct.pack(f">{count}d", *(point[2] for point in points)),
        "first_value": first[1],
        "first_time": first[2],
        "last_value": last[1],
        "last_time": last[2],
        "min_step": low[0],
        "min_value": low[1],
        "min_time": low[2],
        "max_step": high[0],
        "max_value": high[1],
        "max_time": high[2],
    }


def _insert_points_of_chunks() -> None:
    """Every chunk's points back as rows of metric_points."""
    bind = op.get_bind()
    chunks = bind.execute(
        sa.text(
            'SELECT series_id, first_step, point_count, steps, "values", times '
            "FROM metric_chunks ORDER BY series_id, first_step"
        )
    )
    columns = ("series_id", "step", "value", "wall_time")
    _insert_batched("metric_points", columns, _points(chunks))


def _points(chunks: Iterable[Sequence[Any]]) -> Iterator[dict[str, Any]]:
    for series_id, first_step, count, steps, values, times in chunks:
        stepped: Iterable[int] = (
            range(first_step, first_step + count)
            if steps is None
            else struct.unpack(f">{count}q", bytes(steps))
        )
        for step, value, wall_time in zip(
            stepped,
            struct.unpack(f">{count}d", bytes(values)),
            struct.unpack(f">{count}d", bytes(times)),
            strict=True,
        ):
            yield {"series_id": series_id, "step": step, "value": value, "wall_time": wall_time}


def _insert_batched(table: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """INSERT rows, INSERT_BATCH at a time. The rows may come from a query still being read,
    so they are written through a connection of the same transaction only once fetched."""
    statement = sa.table(table, *(sa.column(name) for name in columns)).insert()
    bind = op.get_bind()
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == INSERT_BATCH:
            bind.execute(statement, batch)
            batch = []
    if batch:
        bind.execute(statement, batch)


def _revision_0005() -> ModuleType:
    """Revision 0005's module, loaded by path (its name starts with a digit)."""
    path = Path(__file__).with_name("0005_metric_rollups.py")
    spec = importlib.util.spec_from_file_location("_crucible_migration_0005", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
