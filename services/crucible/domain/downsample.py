"""Reduce a metric series to at most N points without hiding spikes.

Min/max buckets: the first and last points are always kept, the points between are cut
into equal-count buckets and each bucket keeps its lowest and highest point. A loss spike
therefore survives any zoom level, which plain striding (every k-th point) does not promise.

Long series are reduced from rollups instead (summaries of fixed buckets of steps, kept at
ingest): the same promises, with output buckets of equal step ranges.
"""

from collections.abc import Mapping, Sequence
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


# --- rollups --------------------------------------------------------------------------------
#
# Ingest keeps, per series, a summary of every bucket of 2**level consecutive steps at a few
# fixed levels, so a downsampled read of a long series reads a few thousand summaries instead
# of every point. With each level twice as coarse as the one below, a read needs fewer than
# two summaries per output bucket (the coarser level having had fewer than one).

ROLLUP_LEVELS: tuple[int, ...] = tuple(range(6, 17))
"""Bucket widths 64 to 65,536 steps (bucket = step >> level), finest first."""

Point = tuple[int, float, float]
"""(step, value, time)"""


class Rollup(NamedTuple):
    """The points of one bucket: how many, the first and last by step, and the lowest and
    highest by value (the earliest step wins a tie, as with `min()` and `max()`)."""

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


def merge_rollups(old: Rollup, new: Rollup) -> Rollup:
    """The summary of two disjoint sets of points, from theirs: the rule the database's
    upsert applies when a batch adds points to a bucket that already has some."""
    first = new.first if new.first_step < old.first_step else old.first
    last = new.last if new.last_step > old.last_step else old.last
    low = new.low if (new.min_value, new.min_step) < (old.min_value, old.min_step) else old.low
    high = new.high if (new.max_value, -new.max_step) > (old.max_value, -old.max_step) else old.high
    return Rollup(old.point_count + new.point_count, *first, *last, *low, *high)


def rollups_by_bucket(points: Sequence[Point], level: int) -> dict[int, Rollup]:
    """Bucket (step >> level) -> the summary of its points, in bucket order: what the
    database keeps for `level`."""
    members: dict[int, list[Point]] = {}
    for point in points:
        members.setdefault(point[0] >> level, []).append(point)
    return {bucket: rollup_of(members[bucket]) for bucket in sorted(members)}


def coarser_rollups(rollups: Mapping[int, Rollup], shift: int) -> dict[int, Rollup]:
    """Summaries `shift` levels coarser, from finer ones (bucket -> rollup)."""
    coarse: dict[int, Rollup] = {}
    for bucket, rollup in rollups.items():
        parent = bucket >> shift
        seen = coarse.get(parent)
        coarse[parent] = rollup if seen is None else merge_rollups(seen, rollup)
    return coarse


def rollup_level(bucket_counts: Mapping[int, int], max_points: int) -> int | None:
    """The coarsest level with at least as many buckets as a `max_points` reduction has
    output buckets (each keeps its lowest and highest point), or None when even the finest
    level is too coarse. `bucket_counts`: level -> the series' buckets in the range."""
    groups = minmax_groups(max_points)
    fits = [level for level, count in bucket_counts.items() if count >= groups]
    return max(fits) if fits else None


def minmax_rollup_points(rows: Sequence[Rollup], max_points: int) -> list[Point]:
    """The points to keep (in step order) so that at most `max_points` remain, from bucket
    summaries in step order: the first, the last, and the lowest and highest point of each
    of `minmax_groups(max_points)` equal step ranges (a summary belongs to the range its
    first step falls in). The promises of `minmax_indices`, without reading the points."""
    groups = minmax_groups(max_points)
    if not rows:
        return []
    first, last = rows[0].first_step, rows[-1].last_step
    span = last - first + 1
    keep = {first: rows[0].first, last: rows[-1].last}
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


def minmax_groups(max_points: int) -> int:
    """Output buckets of a `max_points` reduction: two points each, plus the first and last."""
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")
    return (max_points - 2) // 2
