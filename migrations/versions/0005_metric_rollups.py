"""metric rollups; metric points without a foreign key to their series

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 09:00:00.000000

Checking the foreign key cost about half of every point insert; the code that deletes runs
now deletes their points (and rollups) itself. The rollups of the points already stored are
computed here, the finest level from the points and each coarser one from the level below.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As crucible.domain.downsample.ROLLUP_LEVELS when this revision was written.
LEVELS = tuple(range(6, 17))
COLUMNS = (
    "series_id, level, bucket, point_count, first_step, first_value, first_time, last_step, "
    "last_value, last_time, min_step, min_value, min_time, max_step, max_value, max_time"
)


def upgrade() -> None:
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.drop_constraint("fk_metric_points_series_id_metric_series", type_="foreignkey")
    op.create_table(
        "metric_rollups",
        sa.Column(
            "series_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
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
    postgres = op.get_bind().dialect.name == "postgresql"
    previous: int | None = None
    for level in LEVELS:
        summary = _postgres_summary if postgres else _portable_summary
        op.execute(f"INSERT INTO metric_rollups ({COLUMNS})\n{summary(level, previous)}")
        previous = level


def downgrade() -> None:
    op.drop_table("metric_rollups")
    op.execute("DELETE FROM metric_points WHERE series_id NOT IN (SELECT id FROM metric_series)")
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_metric_points_series_id_metric_series"),
            "metric_series",
            ["series_id"],
            ["id"],
            ondelete="CASCADE",
        )


def _source(level: int, previous: int | None) -> str:
    """Rows to summarise into `level`'s buckets: (series_id, bucket, n, then step, value and
    time of the first, last, lowest and highest point), from the points or the level below."""
    if previous is None:
        point = "step AS {0}s, value AS {0}v, wall_time AS {0}t"
        points = ", ".join(point.format(which) for which in ("f", "l", "lo", "hi"))
        return f"SELECT series_id, step >> {level} AS bucket, 1 AS n, {points} FROM metric_points"  # noqa: S608
    rollup = "{0}_step AS {1}s, {0}_value AS {1}v, {0}_time AS {1}t"
    rollups = ", ".join(
        rollup.format(*pair)
        for pair in (("first", "f"), ("last", "l"), ("min", "lo"), ("max", "hi"))
    )
    return (
        f"SELECT series_id, bucket >> {level - previous} AS bucket, point_count AS n, "  # noqa: S608
        f"{rollups} FROM metric_rollups WHERE level = {previous}"
    )


def _postgres_summary(level: int, previous: int | None) -> str:
    """One hash aggregate: min(ARRAY[value, offset, time]) carries the step and time of the
    lowest value along with it (offsets within a bucket are exact as float8)."""
    mask = (1 << level) - 1
    start = f"(bucket << {level})"
    return f"""
SELECT series_id, {level}, bucket, n,
    {start} + f[1]::bigint, f[2], f[3], {start} + l[1]::bigint, l[2], l[3],
    {start} + lo[2]::bigint, lo[1], lo[3], {start} - hi[2]::bigint, hi[1], hi[3]
FROM (
    SELECT series_id, bucket, sum(n)::bigint AS n,
        min(ARRAY[(fs & {mask})::float8, fv, ft]) AS f,
        max(ARRAY[(ls & {mask})::float8, lv, lt]) AS l,
        min(ARRAY[lov, (los & {mask})::float8, lot]) AS lo,
        max(ARRAY[hiv, -(his & {mask})::float8, hit]) AS hi
    FROM ({_source(level, previous)}) AS s
    GROUP BY series_id, bucket
) AS p
"""  # noqa: S608


def _portable_summary(level: int, previous: int | None) -> str:
    """Window functions rank each bucket's rows four ways; SQLite has no arrays."""
    window = "PARTITION BY series_id, bucket ORDER BY"
    picks = ", ".join(
        f"max(CASE WHEN {which}_rank = 1 THEN {which}{part} END)"
        for which in ("f", "l", "lo", "hi")
        for part in ("s", "v", "t")
    )
    return f"""
SELECT series_id, {level}, bucket, sum(n), {picks}
FROM (
    SELECT s.*,
        row_number() OVER ({window} fs) AS f_rank,
        row_number() OVER ({window} ls DESC) AS l_rank,
        row_number() OVER ({window} lov, los) AS lo_rank,
        row_number() OVER ({window} hiv DESC, his) AS hi_rank
    FROM ({_source(level, previous)}) AS s
) AS ranked
GROUP BY series_id, bucket
"""  # noqa: S608
