"""Metric time series, built for tens of millions of points.

Keys are interned per run (`metric_series`). A series' points are stored in chunks
(`metric_chunks`): the points one batch added to one series are one row, their steps,
values and times packed as binary arrays, with a summary of them (count, first, last,
lowest and highest point) beside. A 1,000-point batch of 10 keys costs the database 10 rows
instead of 1,000, and a downsampled read of a long series reads summaries, not points.

A (series, step) is stored at most once: a batch drops the steps its series already holds
before it writes its chunk, with the series' row locked, so no two batches can store the
same step.
"""

from sqlalchemy import BigInteger, Float, ForeignKey, Integer, LargeBinary, String, UniqueConstraint
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
    # The widest step range of any of its chunks (last_step - first_step): a read of the
    # steps from `low` on need look no further back than `low - max_chunk_span`.
    max_chunk_span: Mapped[int] = mapped_column(BigInteger, default=0)


class MetricChunk(Base):
    """Points of one series stored by one batch, in step order. Chunks of a series never
    share a step; their step ranges overlap only where a batch filled in older steps."""

    __tablename__ = "metric_chunks"

    series_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("metric_series.id", ondelete="CASCADE"), primary_key=True
    )
    first_step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    last_step: Mapped[int] = mapped_column(BigInteger)
    point_count: Mapped[int] = mapped_column(Integer)
    # Big-endian int64 and float64 arrays, one element per point (`crucible.domain.chunks`).
    # No step array when the chunk holds every step from its first to its last.
    steps: Mapped[bytes | None] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)
    # Seconds since the epoch.
    times: Mapped[bytes] = mapped_column(LargeBinary)
    # Its first and last point by step, and its lowest and highest by value (the earliest
    # step wins a tie): `crucible.domain.downsample.Rollup`'s fields, so a downsampled read
    # needs no points of a chunk that fits in one output bucket.
    first_value: Mapped[float] = mapped_column(Float)
    first_time: Mapped[float] = mapped_column(Float)
    last_value: Mapped[float] = mapped_column(Float)
    last_time: Mapped[float] = mapped_column(Float)
    min_step: Mapped[int] = mapped_column(BigInteger)
    min_value: Mapped[float] = mapped_column(Float)
    min_time: Mapped[float] = mapped_column(Float)
    max_step: Mapped[int] = mapped_column(BigInteger)
    max_value: Mapped[float] = mapped_column(Float)
    max_time: Mapped[float] = mapped_column(Float)
