"""A chunk of a metric series: its points packed as binary arrays, with their summary.

Arrays are big-endian int64 (steps) and float64 (values, times), one element per point in
step order: the byte order Postgres' `int8send` and `float8send` write, so that SQL can
build them too (the migration from point rows does). A chunk holding every step from its
first to its last (a metric logged at every step, the common case) keeps no step array.
"""

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crucible.domain.downsample import Rollup

# The most points one chunk holds; a batch adding more to a series stores several. A
# downsampled read stands for a chunk by its summary only when the chunk is no wider than
# an output bucket, so this bounds how many points a read of N buckets over S steps unpacks
# (none once S / N >= MAX_CHUNK_POINTS: a 2,000-point chart of a million-step series), at
# the cost of a row per this many points of one series on ingest.
MAX_CHUNK_POINTS = 512


def _packed(typecode: str, items: Sequence[float] | Sequence[int]) -> bytes:
    packed = array(typecode, items)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tobytes()


def _unpacked(typecode: str, data: bytes) -> list[Any]:
    items = array(typecode)
    items.frombytes(data)
    if sys.byteorder == "little":
        items.byteswap()
    return items.tolist()


@dataclass(frozen=True)
class Chunk:
    """What one row of `metric_chunks` holds, but its series."""

    summary: Rollup
    steps: bytes | None
    values: bytes
    times: bytes


def pack(steps: Sequence[int], values: Sequence[float], times: Sequence[float]) -> Chunk:
    """The chunk of some points in step order (distinct steps, at least one point)."""
    if not steps:
        raise ValueError("a chunk needs at least one point")
    count = len(steps)
    low = min(range(count), key=values.__getitem__)  # the first of equal values wins
    high = max(range(count), key=values.__getitem__)
    summary = Rollup(
        count,
        *(steps[0], values[0], times[0]),
        *(steps[-1], values[-1], times[-1]),
        *(steps[low], values[low], times[low]),
        *(steps[high], values[high], times[high]),
    )
    dense = steps[-1] - steps[0] + 1 == count
    return Chunk(
        summary,
        None if dense else _packed("q", steps),
        _packed("d", values),
        _packed("d", times),
    )


@dataclass(frozen=True)
class PackedChunk:
    """A chunk's points as its row holds them (`unpack` reads them)."""

    first_step: int
    point_count: int
    steps: bytes | None
    values: bytes
    times: bytes


@dataclass(frozen=True)
class Points:
    """Points as parallel lists, in step order."""

    steps: list[int]
    values: list[float]
    times: list[float]


def unpack(chunk: PackedChunk) -> Points:
    """A chunk's points back, from its row's columns."""
    return Points(
        unpack_steps(chunk.first_step, chunk.point_count, chunk.steps),
        _unpacked("d", chunk.values),
        _unpacked("d", chunk.times),
    )


def unpack_steps(first_step: int, point_count: int, steps: bytes | None) -> list[int]:
    """Only a chunk's steps (what a batch checks for duplicates)."""
    if steps is None:
        return list(range(first_step, first_step + point_count))
    return _unpacked("q", steps)
