"""Summaries of a chunk's points per output bucket of a downsampled read.

A chunk wider than the read's buckets cannot stand for its points with one summary; instead
of a row per point, its points are summarised per bucket they fall in, vectorised, so the
read still reduces one summary per chunk and bucket whatever the chunk's size.
"""

import numpy as np
import numpy.typing as npt

from crucible.domain.chunks import PackedChunk
from crucible.domain.downsample import Rollup

# Above this, (step - first) * groups may overflow int64; buckets are computed exactly in
# Python instead (steps that large are not what training loops log).
_INT64_SAFE = 1 << 62


Columns = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]
"""Steps, values and times of some points in step order."""


def decode(chunk: PackedChunk) -> Columns:
    """A chunk's points as native arrays (`crucible.domain.chunks` describes the format)."""
    first, count = chunk.first_step, chunk.point_count
    return (
        np.arange(first, first + count, dtype=np.int64)
        if chunk.steps is None
        else np.frombuffer(chunk.steps, dtype=">i8").astype(np.int64),
        np.frombuffer(chunk.values, dtype=">f8").astype(np.float64),
        np.frombuffer(chunk.times, dtype=">f8").astype(np.float64),
    )


def bucket_summaries(
    columns: Columns,
    *,
    first: int,
    span: int,
    groups: int,
) -> list[Rollup]:
    """The summaries of some points in step order, one per output bucket they fall in: a
    read of `span` steps from `first` in `groups` buckets puts step s in bucket
    (s - first) * groups // span, as `minmax_rollup_points` places summaries."""
    steps, values, _ = columns
    if len(steps) == 0:
        return []
    if span * groups < _INT64_SAFE:
        bucket = (steps - first) * groups // span
    else:
        bucket = np.array([(s - first) * groups // span for s in steps.tolist()], dtype=np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(bucket)) + 1))
    stops = np.append(starts[1:], len(steps))
    segment = np.repeat(np.arange(len(starts)), stops - starts)
    # The earliest point of each bucket holding its lowest (highest) value, as min() and
    # max() pick among equals.
    low = _first_in_segment(values == np.minimum.reduceat(values, starts)[segment], segment)
    high = _first_in_segment(values == np.maximum.reduceat(values, starts)[segment], segment)
    counts = (stops - starts).tolist()
    picked = [array[at].tolist() for at in (starts, stops - 1, low, high) for array in columns]
    return [Rollup._make(row) for row in zip(counts, *picked, strict=True)]


def _first_in_segment(
    matches: npt.NDArray[np.bool_], segment: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """The first index of each segment where `matches` holds (every segment has one)."""
    found = np.flatnonzero(matches)
    owner = segment[found]
    first = np.ones(len(found), dtype=bool)
    first[1:] = owner[1:] != owner[:-1]
    return found[first]
