"""A chunk packs its points and gives them back unchanged; its summary, and the per-bucket
summaries a downsampled read makes of a wide chunk, equal summarising the points."""

import itertools
import struct

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from crucible.core.metrics.buckets import bucket_summaries, decode
from crucible.domain.chunks import PackedChunk, pack, unpack, unpack_steps
from crucible.domain.downsample import Point, rollup_of

points_st = st.dictionaries(
    keys=st.integers(min_value=0, max_value=2**62),
    values=st.floats(allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=200,
).map(lambda found: [(s, v, 1.7e9 + i / 8) for i, (s, v) in enumerate(sorted(found.items()))])


def packed(points: list[Point]) -> PackedChunk:
    chunk = pack([p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    return PackedChunk(
        chunk.summary.first_step, chunk.summary.point_count, chunk.steps, chunk.values, chunk.times
    )


@given(points=points_st)
def test_a_chunk_gives_its_points_back_with_their_summary(points: list[Point]) -> None:
    chunk = pack([p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    assert chunk.summary == rollup_of(points)
    back = unpack(packed(points))
    assert list(zip(back.steps, back.values, back.times, strict=True)) == points
    assert unpack_steps(chunk.summary.first_step, len(points), chunk.steps) == back.steps


def test_a_dense_chunk_keeps_no_steps_and_arrays_are_big_endian() -> None:
    dense = pack([5, 6, 7], [0.5, -1.0, 2.0], [1.7e9, 1.7e9, 1.7e9])
    assert dense.steps is None
    assert dense.values == struct.pack(">3d", 0.5, -1.0, 2.0)
    gappy = pack([5, 7], [0.5, 2.0], [1.7e9, 1.7e9])
    assert gappy.steps == struct.pack(">2q", 5, 7)


@given(points=points_st, groups=st.integers(min_value=1, max_value=50), data=st.data())
def test_bucket_summaries_equal_summarising_each_bucket(
    points: list[Point], groups: int, data: st.DataObject
) -> None:
    first = data.draw(st.integers(min_value=0, max_value=points[0][0]))
    least = points[-1][0] - first + 1
    span = data.draw(st.integers(min_value=least, max_value=least + 2**40))
    summaries = bucket_summaries(decode(packed(points)), first=first, span=span, groups=groups)
    expected = [
        rollup_of(list(members))
        for _, members in itertools.groupby(points, key=lambda p: (p[0] - first) * groups // span)
    ]
    assert summaries == expected


def test_bucket_summaries_of_no_points_are_none() -> None:
    empty = (np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64))
    assert bucket_summaries(empty, first=0, span=10, groups=3) == []
