"""Metric time series, built for tens of millions of points.

Keys are interned per run (`metric_series`), so a point row is four narrow columns and the
primary key (series_id, step) is both the dedupe rule and the index every history read uses.
"""

from sqlalchemy import BigInteger, Float, ForeignKey, String, UniqueConstraint
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

    series_id: Mapped[int] = mapped_column(
        ForeignKey("metric_series.id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    # Seconds since the epoch; a float column is half the work of a timestamp on ingest.
    wall_time: Mapped[float] = mapped_column(Float)
