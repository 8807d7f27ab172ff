"""Reduce a metric series to at most N points without hiding spikes.

Min/max buckets: the first and last points are always kept, the points between are cut
into equal-count buckets and each bucket keeps its lowest and highest point. A loss spike
therefore survives any zoom level, which plain striding (every k-th point) does not promise.

Long series are reduced from summaries instead (`Rollup`: what a stored chunk of points
keeps beside them, `crucible.domain.chunks`): the same promises, with output buckets of
equal step ranges.
"""

from collections.abc import Sequence
from typing import NamedTuple

MIN_POINTS = 4  # first, last, and one bucket's min and max


def minmax_indices(values: Sequence[float], max_points: int) -> list[int]:
    """Indices (ascending) of the points to keep so that at most `max_points` remain."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")
    n = len(values)
    if n <= max_points:
        return list(range(n))
    interior = n - 2
    buckets = (max_points - 2) // 2
    keep = {0, n - 1}
    for b in range(buckets):
        lo = 1 + b * interior // buckets
        hi = 1 + (b + 1) * interior // buckets
        if lo >= hi:
            continue
        chunk = range(lo, hi)
        keep.add(min(chunk, key=values.__getitem__))
        keep.add(max(chunk, key=values.__getitem__))
    return sorted(keep)


# --- summaries ------------------------------------------------------------------------------

Point = tuple[int, float, float]
"""(step, value, time)"""


class Rollup(NamedTuple):
    """A summary of some points of one series: how many, the first and last by step, and the
    lowest and highest by value (the earliest step wins a tie, as with `min()` and `max()`)."""

    point_count: int
    first_step: int
    first_value: float
    first_time: float
    last_step: int
    last_value: float
    last_time: float
    min_step: int
    min_value: float
    min_time: float
    max_step: int
    max_value: float
    max_time: float

    @property
    def first(self) -> Point:
        return self[1:4]

    @property
    def last(self) -> Point:
        return self[4:7]

    @property
    def low(self) -> Point:
        return self[7:10]

    @property
    def high(self) -> Point:
        return self[10:13]


def rollup_of(points: Sequence[Point]) -> Rollup:
    """The summary of some points (distinct steps, any order); there must be at least one."""
    if not points:
        raise ValueError("a rollup needs at least one point")
    ordered = sorted(points)
    low = min(ordered, key=lambda p: p[1])  # in step order: the earliest of a tie wins
    high = max(ordered, key=lambda p: p[1])
    return Rollup(len(ordered), *ordered[0], *ordered[-1], *low, *high)


def minmax_rollup_points(rows: Sequence[Rollup], max_points: int) -> list[Point]:
    """The points to keep (in step order) so that at most `max_points` remain, from the
    summaries of disjoint sets of points, in order of their first steps: the first, the last,
    and the lowest and highest point of each of `minmax_groups(max_points)` equal step ranges
    (a summary belongs to the range its first step falls in). The promises of
    `minmax_indices`, without reading the points. Summaries may overlap in steps (chunks of
    a series where a batch filled in older steps), so the last point is the latest of any."""
    groups = minmax_groups(max_points)
    if not rows:
        return []
    last_row = max(rows, key=_last_step)
    first, last = rows[0].first_step, last_row.last_step
    span = last - first + 1
    keep = {first: rows[0].first, last: last_row.last}
    current, low, high = -1, rows[0], rows[0]
    for row in rows:
        group = (row.first_step - first) * groups // span
        if group != current:
            if current >= 0:
                keep[low.min_step], keep[high.max_step] = low.low, high.high
            current, low, high = group, row, row
            continue
        if (row.min_value, row.min_step) < (low.min_value, low.min_step):
            low = row
        if (row.max_value, -row.max_step) > (high.max_value, -high.max_step):
            high = row
    keep[low.min_step], keep[high.max_step] = low.low, high.high
    return [keep[step] for step in sorted(keep)]


def _last_step(row: Rollup) -> int:
    return row.last_step


def minmax_groups(max_points: int) -> int:
    """Output buckets of a `max_points` reduction: two points each, plus the first and last."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")
    return (max_points - 2) // 2
