"""Properties of min/max-bucket downsampling: bounded size, extremes and ends always kept,
from the points or from summaries of disjoint sets of them (the chunks a series is stored in)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crucible.domain.downsample import (
    MIN_POINTS,
    Point,
    minmax_groups,
    minmax_indices,
    minmax_rollup_points,
    rollup_of,
)

values_st = st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=400)
budget_st = st.integers(min_value=MIN_POINTS, max_value=120)


@given(values=values_st, max_points=budget_st)
def test_never_more_than_max_points(values: list[float], max_points: int) -> None:
    assert len(minmax_indices(values, max_points)) <= max_points


@given(values=values_st, max_points=budget_st)
def test_indices_ascending_unique_and_in_range(values: list[float], max_points: int) -> None:
    kept = minmax_indices(values, max_points)
    assert all(a < b for a, b in itertools.pairwise(kept))
    assert all(0 <= i < len(values) for i in kept)


@given(values=values_st.filter(bool), max_points=budget_st)
def test_first_last_and_global_extremes_kept(values: list[float], max_points: int) -> None:
    kept = minmax_indices(values, max_points)
    assert kept[0] == 0
    assert kept[-1] == len(values) - 1
    kept_values = [values[i] for i in kept]
    assert min(values) in kept_values
    assert max(values) in kept_values


@given(values=values_st, data=st.data())
def test_identity_when_it_already_fits(values: list[float], data: st.DataObject) -> None:
    max_points = data.draw(st.integers(min_value=max(MIN_POINTS, len(values)), max_value=500))
    assert minmax_indices(values, max_points) == list(range(len(values)))


@given(
    values=st.lists(st.integers(min_value=-5, max_value=5).map(float), min_size=50, max_size=400),
    max_points=budget_st,
)
def test_repeated_values_still_bounded(values: list[float], max_points: int) -> None:
    """Ties (flat stretches of a curve) must not let a bucket keep more than two points."""
    kept = minmax_indices(values, max_points)
    assert len(kept) <= max_points
    assert len(set(kept)) == len(kept)


def test_a_single_spike_survives_heavy_reduction() -> None:
    values = [0.0] * 100_000
    values[61_803] = 1e9
    kept = minmax_indices(values, 10)
    assert 61_803 in kept
    assert len(kept) <= 10


@pytest.mark.parametrize("max_points", [-1, 0, 1, 2, 3])
def test_below_four_points_is_refused(max_points: int) -> None:
    with pytest.raises(ValueError, match=str(MIN_POINTS)):
        minmax_indices([1.0, 2.0, 3.0], max_points)


# --- rollups --------------------------------------------------------------------------------

# Few distinct values, so that ties for lowest and highest are common.
series_st = st.dictionaries(
    keys=st.integers(min_value=0, max_value=5_000),
    values=st.integers(min_value=-4, max_value=4).map(float),
    min_size=1,
    max_size=300,
).map(lambda points: [(s, v, 1.7e9 + s / 8) for s, v in sorted(points.items())])


def test_a_rollup_keeps_first_last_and_the_earliest_extremes() -> None:
    points = [(10, 2.0, 1.0), (11, -1.0, 2.0), (12, 5.0, 3.0), (13, -1.0, 4.0), (14, 5.0, 5.0)]
    rollup = rollup_of(points[::-1])
    assert rollup.point_count == 5
    assert (rollup.first, rollup.last) == (points[0], points[-1])
    assert (rollup.low, rollup.high) == (points[1], points[2])


def chunk_summaries(points: list[Point], owners: list[int]) -> list:
    """The summaries of the points split into chunks (point i goes to chunk owners[i]), in
    order of their first steps, as a series' chunks are read."""
    chunks: dict[int, list[Point]] = {}
    for point, owner in zip(points, owners, strict=True):
        chunks.setdefault(owner, []).append(point)
    return sorted((rollup_of(members) for members in chunks.values()), key=lambda r: r.first_step)


@given(points=series_st, max_points=budget_st, data=st.data())
def test_reducing_chunk_summaries_keeps_the_promises(
    points: list[Point], max_points: int, data: st.DataObject
) -> None:
    """Chunks in step order (each a run of consecutive points), or interleaved, as when a
    batch fills in older steps: the ends and the extremes survive either way."""
    chunk_count = data.draw(st.integers(min_value=1, max_value=len(points)))
    if data.draw(st.booleans()):
        owners = sorted(
            data.draw(
                st.lists(
                    st.integers(0, chunk_count - 1), min_size=len(points), max_size=len(points)
                )
            )
        )
    else:
        owners = data.draw(
            st.lists(st.integers(0, chunk_count - 1), min_size=len(points), max_size=len(points))
        )
    kept = minmax_rollup_points(chunk_summaries(points, owners), max_points)
    assert len(kept) <= max_points
    assert set(kept) <= set(points)
    assert [p[0] for p in kept] == sorted({p[0] for p in kept})
    assert (kept[0], kept[-1]) == (points[0], points[-1])
    assert min(p[1] for p in points) in [p[1] for p in kept]
    assert max(p[1] for p in points) in [p[1] for p in kept]


def test_the_last_point_comes_from_whichever_chunk_reaches_furthest() -> None:
    """A chunk that starts later but ends earlier (a batch filling in older steps) is last
    in first-step order; the series' last point is still the other chunk's."""
    points = [(s, 0.0, 1.7e9 + s) for s in range(0, 101)]
    owners = [1 if 40 < s < 60 and s % 2 else 0 for s in range(0, 101)]
    rows = chunk_summaries(points, owners)
    assert [r.first_step for r in rows] == [0, 41] and rows[-1].last_step == 59
    kept = minmax_rollup_points(rows, 4)
    assert (kept[0], kept[-1]) == (points[0], points[-1])


@given(points=series_st, max_points=budget_st)
def test_reducing_one_point_rollups_is_a_minmax_reduction(
    points: list[Point], max_points: int
) -> None:
    """Each output bucket keeps the lowest and highest of the points whose step falls in it."""
    rows = [rollup_of([point]) for point in points]
    kept = minmax_rollup_points(rows, max_points)
    groups = minmax_groups(max_points)
    first, span = points[0][0], points[-1][0] - points[0][0] + 1
    expected = {points[0], points[-1]}
    for _, members in itertools.groupby(points, key=lambda p: (p[0] - first) * groups // span):
        bucket = list(members)
        expected.add(min(bucket, key=lambda p: p[1]))
        expected.add(max(bucket, key=lambda p: p[1]))
    assert kept == sorted(expected)
