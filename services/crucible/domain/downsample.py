"""Reduce a metric series to at most N points without hiding spikes.

Min/max buckets: the first and last points are always kept, the points between are cut
into equal-count buckets and each bucket keeps its lowest and highest point. A loss spike
therefore survives any zoom level, which plain striding (every k-th point) does not promise.
"""

from collections.abc import Sequence

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
