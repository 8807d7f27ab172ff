"""Metric time series, built for tens of millions of points.

Keys are interned per run (`metric_series`), so a point row is four narrow columns and the
primary key (series_id, step) is both the dedupe rule and the index every history read uses.

`metric_points` and `metric_rollups` have no foreign key to `metric_series`: checking one
per inserted point cost about half of the insert. Whoever deletes runs deletes their points
and rollups in the same transaction (`crucible.core.metrics.delete_run_metrics`).
"""

from sqlalchemy import BigInteger, Float, ForeignKey, SmallInteger, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import Base
from crucible.db.types import BigId


class MetricSeries(Base):
    __tablename__ = "metric_series"
    __table_args__ = (UniqueConstraint("run_id", "key"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(250))
    point_count: Mapped[int] = mapped_column(BigInteger, default=0)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_value: Mapped[float | None] = mapped_column(Float)


class MetricPoint(Base):
    __tablename__ = "metric_points"

    series_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    # Seconds since the epoch; a float column is half the work of a timestamp on ingest.
    wall_time: Mapped[float] = mapped_column(Float)


class MetricRollup(Base):
    """The points of one series in one bucket of 2**level steps (bucket = step >> level),
    summarised at ingest: a downsampled read of a long series reads these instead of the
    points. Only newly stored points are added, so a re-sent point changes nothing."""

    __tablename__ = "metric_rollups"

    series_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    point_count: Mapped[int] = mapped_column(BigInteger)
    # Four of its points, whole (step, value and wall time), so that a read needs no other:
    # the first and last by step, the lowest and highest by value (the earliest step wins
    # a tie).
    first_step: Mapped[int] = mapped_column(BigInteger)
    first_value: Mapped[float] = mapped_column(Float)
    first_time: Mapped[float] = mapped_column(Float)
    last_step: Mapped[int] = mapped_column(BigInteger)
    last_value: Mapped[float] = mapped_column(Float)
    last_time: Mapped[float] = mapped_column(Float)
    min_step: Mapped[int] = mapped_column(BigInteger)
    min_value: Mapped[float] = mapped_column(Float)
    min_time: Mapped[float] = mapped_column(Float)
    max_step: Mapped[int] = mapped_column(BigInteger)
    max_value: Mapped[float] = mapped_column(Float)
    max_time: Mapped[float] = mapped_column(Float)
