"""Read a run's series back, whole or cut to at most N points.

A whole read unpacks the chunks overlapping the range. A downsampled read of a series with
more points than asked for reads the chunks' summaries, not their points: a chunk that fits
in one output bucket is represented by its first, last, lowest and highest point; only the
chunks wider than a bucket, and those crossing the range's ends, are read, and summarised
per bucket (`buckets`).

Built unvalidated: the data comes from our own columns, and validating a million-element
list would cost more than reading it.
"""

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.metrics.buckets import Columns, bucket_summaries, decode
from crucible.core.metrics.store import MetricStore, store_for
from crucible.core.runs import load_run
from crucible.db.tables import MetricSeries
from crucible.domain.chunks import Points
from crucible.domain.downsample import MIN_POINTS, Rollup, minmax_groups, minmax_rollup_points
from crucible.domain.enums import Role
from crucible.domain.errors import InvalidInput
from crucible.domain.json_values import MAX_INT64
from crucible.schemas.metrics import (
    MetricHistory,
    MetricKeyPublic,
    MetricKeysPublic,
    MetricSeriesPublic,
)

_NO_POINTS = Points([], [], [])
_NO_COLUMNS: Columns = (
    np.empty(0, dtype=np.int64),
    np.empty(0, dtype=np.float64),
    np.empty(0, dtype=np.float64),
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


@dataclass(frozen=True)
class _Stored:
    """What the series row says of its points."""

    id: int
    point_count: int
    last_step: int
    max_chunk_span: int


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
    to `max_points` (keeping first, last and per-bucket min and max) when given."""
    run = load_run(session, principal, run_id, Role.viewer)
    if max_points is not None and max_points < MIN_POINTS:
        raise InvalidInput(
            "max_points", max_points, f"ask for at least {MIN_POINTS} points", location="query"
        )
    low = 0 if step_min is None else step_min
    high = MAX_INT64 if step_max is None else step_max
    query = (
        select(
            MetricSeries.id,
            MetricSeries.key,
            MetricSeries.point_count,
            MetricSeries.last_step,
            MetricSeries.max_chunk_span,
        )
        .where(MetricSeries.run_id == run.id, MetricSeries.point_count > 0)
        .order_by(MetricSeries.key)
    )
    if keys is not None:
        query = query.where(MetricSeries.key.in_(keys))
    store = store_for(session)
    series: list[MetricSeriesPublic] = []
    for series_id, key, point_count, last_step, max_span in session.execute(query).all():
        stored = _Stored(
            series_id, point_count, MAX_INT64 if last_step is None else last_step, max_span
        )
        points, total = _read_series(store, stored, low, min(high, stored.last_step), max_points)
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


def _read_series(
    store: MetricStore, series: _Stored, low: int, high: int, max_points: int | None
) -> tuple[Points, int]:
    """The series' points in [low, high] and how many there are, cut to `max_points`."""
    if low > high:
        return _NO_POINTS, 0
    if max_points is None or series.point_count <= max_points:
        points = _whole(store, series, low, high)
        return points, len(points.steps)
    summaries = store.summaries_in(series.id, series.max_chunk_span, low, high)
    inside = [s for s in summaries if low <= s.first_step and s.last_step <= high]
    crossing = [
        s.first_step for s in summaries if not (low <= s.first_step and s.last_step <= high)
    ]
    ends = [_within(decode(chunk), low, high) for chunk in store.packed_at(series.id, crossing)]
    ends = [end for end in ends if len(end[0])]
    total = sum(s.point_count for s in inside) + sum(len(end[0]) for end in ends)
    if total <= max_points:
        points = _whole(store, series, low, high)
        return points, len(points.steps)
    first = min([s.first_step for s in inside] + [int(end[0][0]) for end in ends])
    last = max([s.last_step for s in inside] + [int(end[0][-1]) for end in ends])
    groups = minmax_groups(max_points)
    span = last - first + 1
    # A chunk no wider than an output bucket is represented by its summary; the points of
    # wider ones (and of the ends) by their summaries per bucket.
    narrow = [s for s in inside if (s.last_step - s.first_step + 1) * groups <= span]
    too_wide = [s.first_step for s in inside if (s.last_step - s.first_step + 1) * groups > span]
    wide = [decode(chunk) for chunk in store.packed_at(series.id, too_wide)]
    rows = narrow + bucket_summaries(_joined([*wide, *ends]), first=first, span=span, groups=groups)
    rows.sort(key=_first_step)
    kept = minmax_rollup_points(rows, max_points)
    return Points([p[0] for p in kept], [p[1] for p in kept], [p[2] for p in kept]), total


def _joined(parts: Sequence[Columns]) -> Columns:
    """Some chunks' points as one set of arrays in step order (chunks of a series overlap
    only where a batch filled in older steps; then they are sorted)."""
    if not parts:
        return _NO_COLUMNS
    steps, values, times = (np.concatenate([part[i] for part in parts]) for i in range(3))
    if len(steps) > 1 and not bool(np.all(steps[1:] > steps[:-1])):
        order = np.argsort(steps, kind="stable")
        steps, values, times = steps[order], values[order], times[order]
    return steps, values, times


def _within(columns: Columns, low: int, high: int) -> Columns:
    steps, values, times = columns
    start, stop = np.searchsorted(steps, low, "left"), np.searchsorted(steps, high, "right")
    return steps[start:stop], values[start:stop], times[start:stop]


def _first_step(row: Rollup) -> int:
    return row.first_step


def _whole(store: MetricStore, series: _Stored, low: int, high: int) -> Points:
    return _cut(_merged(store.chunks_in(series.id, series.max_chunk_span, low, high)), low, high)


def _merged(chunks: Sequence[Points]) -> Points:
    """The points of some chunks of one series, in step order. Chunks overlap only where a
    batch filled in older steps; then the points are sorted."""
    if len(chunks) == 1:
        return chunks[0]
    ordered = sorted(chunks, key=lambda c: c.steps[0])
    steps: list[int] = []
    values: list[float] = []
    times: list[float] = []
    for chunk in ordered:
        steps += chunk.steps
        values += chunk.values
        times += chunk.times
    if all(a.steps[-1] < b.steps[0] for a, b in itertools.pairwise(ordered)):
        return Points(steps, values, times)
    order = sorted(range(len(steps)), key=steps.__getitem__)
    return Points([steps[i] for i in order], [values[i] for i in order], [times[i] for i in order])


def _cut(points: Points, low: int, high: int) -> Points:
    start, stop = bisect_left(points.steps, low), bisect_right(points.steps, high)
    if start == 0 and stop == len(points.steps):
        return points
    return Points(points.steps[start:stop], points.values[start:stop], points.times[start:stop])
