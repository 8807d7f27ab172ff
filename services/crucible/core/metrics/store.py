"""The statements of the chunked metric store: the same on either database, but for how
Postgres returns the packed columns (`PostgresMetricStore`).

A batch writes one `metric_chunks` row per series it adds points to; a read selects the
chunks overlapping its step range by the primary key (series_id, first_step), bounded below
by the series' widest chunk (`max_chunk_span`), so it never scans the series from its start.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, insert, select, text, update
from sqlalchemy.orm import Session

from crucible.db.tables import MetricChunk, MetricSeries, Run
from crucible.db.upsert import insert_statement
from crucible.domain.chunks import Chunk, PackedChunk, Points, unpack, unpack_steps
from crucible.domain.downsample import Rollup
from crucible.domain.errors import NotFound


@dataclass(frozen=True)
class SeriesState:
    """A series a batch writes to, as its locked row says."""

    id: int
    last_step: int | None
    max_chunk_span: int


@dataclass(frozen=True)
class SeriesGain:
    """What one batch added to one series."""

    series_id: int
    added: int
    top_step: int
    top_value: float
    span: int  # the new chunk's last step minus its first


class MetricStore:
    """The store's statements, for one session's database (`store_for`)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # --- ingest -----------------------------------------------------------------------------

    def hold_run(self, run_id: int) -> int:
        """Key-share lock the run row until commit and return its project's id: a deletion
        of the run waits for this batch (and then cascades to its chunks), or this batch
        waits for the deletion and finds no run, rather than failing on a foreign key."""
        project_id = self.session.scalar(
            select(Run.project_id).where(Run.id == run_id).with_for_update(key_share=True)
        )
        if project_id is None:
            raise NotFound("run", run_id)
        return project_id

    def lock_series(self, run_id: int, keys: list[str]) -> dict[str, SeriesState]:
        """The series of `keys`, created where missing, their rows locked (in id order, so
        that concurrent batches of one run wait on each other and never deadlock)."""
        query = (
            select(
                MetricSeries.key,
                MetricSeries.id,
                MetricSeries.last_step,
                MetricSeries.max_chunk_span,
            )
            .where(MetricSeries.run_id == run_id, MetricSeries.key.in_(keys))
            .order_by(MetricSeries.id)
            .with_for_update()
        )
        found = {row.key: _series_state(row) for row in self.session.execute(query)}
        missing = [k for k in keys if k not in found]
        if missing:
            self.session.execute(
                insert_statement(self.session, MetricSeries).on_conflict_do_nothing(),
                [
                    {"run_id": run_id, "key": k, "point_count": 0, "max_chunk_span": 0}
                    for k in missing
                ],
            )
            again = query.where(MetricSeries.key.in_(missing))
            found.update({row.key: _series_state(row) for row in self.session.execute(again)})
        return found

    def stored_steps(self, series: SeriesState, low: int, high: int) -> set[int]:
        """The steps of `series` already stored in [low, high]."""
        rows = self.session.execute(
            select(MetricChunk.first_step, MetricChunk.point_count, MetricChunk.steps).where(
                *self._overlapping(series.id, series.max_chunk_span, low, high)
            )
        )
        stored: set[int] = set()
        for first_step, count, steps in rows:
            stored.update(s for s in unpack_steps(first_step, count, steps) if low <= s <= high)
        return stored

    def add_chunks(self, chunks: Sequence[tuple[int, Chunk]]) -> None:
        """Insert one chunk per (series id, chunk)."""
        self.session.execute(
            insert(MetricChunk),
            [
                {
                    "series_id": series_id,
                    "steps": chunk.steps,
                    "values": chunk.values,
                    "times": chunk.times,
                    **chunk.summary._asdict(),
                }
                for series_id, chunk in chunks
            ],
        )

    def apply_gains(self, gains: Sequence[SeriesGain]) -> None:
        """Keep each series' count, last point and widest chunk right. A top step above the
        stored last step was necessarily new, so the last value only ever comes from a point
        this batch stored."""
        ordered = sorted(gains, key=_by_series)
        for start in range(0, len(ordered), _GAINS_PER_STATEMENT):
            part = ordered[start : start + _GAINS_PER_STATEMENT]
            values = ", ".join(
                f"(CAST(:i{n} AS BIGINT), CAST(:a{n} AS BIGINT), CAST(:s{n} AS BIGINT), "
                f"CAST(:v{n} AS DOUBLE PRECISION), CAST(:w{n} AS BIGINT))"
                for n in range(len(part))
            )
            params: dict[str, int | float] = {}
            for n, gain in enumerate(part):
                params |= {
                    f"i{n}": gain.series_id,
                    f"a{n}": gain.added,
                    f"s{n}": gain.top_step,
                    f"v{n}": gain.top_value,
                    f"w{n}": gain.span,
                }
            self.session.execute(text(_UPDATE_SERIES.format(values=values)), params)

    def advance_run(self, run_id: int, top_step: int) -> None:
        # Conditional, so concurrent batches can only move it forward.
        self.session.execute(
            update(Run)
            .where(Run.id == run_id, (Run.latest_step.is_(None)) | (Run.latest_step < top_step))
            .values(latest_step=top_step)
        )

    # --- history ----------------------------------------------------------------------------

    def chunks_in(self, series_id: int, max_span: int, low: int, high: int) -> list[Points]:
        """The points of the chunks overlapping [low, high], chunk by chunk in first-step
        order (not cut to the range)."""
        statement = (
            select(*_PACKED)
            .where(*self._overlapping(series_id, max_span, low, high))
            .order_by(MetricChunk.first_step)
        )
        return [unpack(chunk) for chunk in self._packed(statement)]

    def packed_at(self, series_id: int, first_steps: Sequence[int]) -> list[PackedChunk]:
        """The chunks starting at `first_steps`, still packed, in first-step order."""
        if not first_steps:
            return []
        statement = (
            select(*_PACKED)
            .where(MetricChunk.series_id == series_id, MetricChunk.first_step.in_(first_steps))
            .order_by(MetricChunk.first_step)
        )
        return self._packed(statement)

    def _packed(
        self, statement: "Select[int, int, bytes | None, bytes, bytes]"
    ) -> list[PackedChunk]:
        return [PackedChunk(*row) for row in self.session.execute(statement)]

    def summaries_in(self, series_id: int, max_span: int, low: int, high: int) -> list[Rollup]:
        """The summaries of the chunks overlapping [low, high], in first-step order."""
        rows = self.session.execute(
            select(*_SUMMARY)
            .where(*self._overlapping(series_id, max_span, low, high))
            .order_by(MetricChunk.first_step)
        )
        return [Rollup._make(row) for row in rows]

    @staticmethod
    def _overlapping(series_id: int, max_span: int, low: int, high: int) -> tuple[Any, ...]:
        return (
            MetricChunk.series_id == series_id,
            MetricChunk.first_step.between(max(0, low - max_span), high),
            MetricChunk.last_step >= low,
        )


# A chunk's summary columns are named as `Rollup`'s fields, in its order.
_SUMMARY = tuple(getattr(MetricChunk, field) for field in Rollup._fields)
_PACKED = (
    MetricChunk.first_step,
    MetricChunk.point_count,
    MetricChunk.steps,
    MetricChunk.values,
    MetricChunk.times,
)


def _series_state(row: Row[str, int, int | None, int]) -> SeriesState:
    return SeriesState(row.id, row.last_step, row.max_chunk_span)


class PostgresMetricStore(MetricStore):
    """Reads the packed columns in Postgres' binary format: as text, bytea travels as hex,
    twice its size, and decoding it costs the API more than the query."""

    def _packed(
        self, statement: "Select[int, int, bytes | None, bytes, bytes]"
    ) -> list[PackedChunk]:
        compiled = statement.compile(
            dialect=self.session.get_bind().dialect,
            compile_kwargs={"render_postcompile": True},
        )
        driver = self.session.connection().connection.driver_connection
        with driver.cursor(binary=True) as cursor:  # type: ignore[union-attr]
            cursor.execute(str(compiled), compiled.params)
            return [PackedChunk(*row) for row in cursor]


def store_for(session: Session) -> MetricStore:
    """The store for the session's database, chosen here once."""
    if session.get_bind().dialect.name == "postgresql":
        return PostgresMetricStore(session)
    return MetricStore(session)


def _by_series(gain: SeriesGain) -> int:
    return gain.series_id


# One statement for every series of a batch (a CTE, not `FROM (VALUES ...) AS g(...)`, which
# SQLite cannot name). SET reads the row's values before the update on both databases.
_UPDATE_SERIES = """
WITH gain(series_id, added, top_step, top_value, span) AS (VALUES {values})
UPDATE metric_series SET
    point_count = point_count + gain.added,
    last_value = CASE WHEN last_step IS NULL OR gain.top_step > last_step
                      THEN gain.top_value ELSE last_value END,
    last_step = CASE WHEN last_step IS NULL OR gain.top_step > last_step
                     THEN gain.top_step ELSE last_step END,
    max_chunk_span = CASE WHEN gain.span > max_chunk_span THEN gain.span ELSE max_chunk_span END
FROM gain
WHERE metric_series.id = gain.series_id
"""
# Five parameters a series: within SQLite's 32,766 and Postgres' 65,535 per statement.
_GAINS_PER_STATEMENT = 1_000
