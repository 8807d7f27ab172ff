"""Properties of min/max-bucket downsampling: bounded size, extremes and ends always kept;
rollups (bucket summaries) that merge like the points they summarise."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crucible.domain.downsample import (
    MIN_POINTS,
    ROLLUP_LEVELS,
    Point,
    coarser_rollups,
    merge_rollups,
    minmax_groups,
    minmax_indices,
    minmax_rollup_points,
    rollup_level,
    rollup_of,
    rollups_by_bucket,
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


@given(points=series_st, data=st.data())
def test_merging_rollups_equals_summarising_all_points(
    points: list[Point], data: st.DataObject
) -> None:
    """The upsert's rule: folding new points into a bucket's rollup, in any order."""
    if len(points) < 2:
        return
    cut = data.draw(st.integers(min_value=1, max_value=len(points) - 1))
    shuffled = data.draw(st.permutations(points))
    old, new = rollup_of(shuffled[:cut]), rollup_of(shuffled[cut:])
    assert merge_rollups(old, new) == rollup_of(points)
    assert merge_rollups(new, old) == rollup_of(points)


@given(points=series_st)
def test_coarser_levels_from_finer_ones_equal_bucketing_the_points(points: list[Point]) -> None:
    finer = rollups_by_bucket(points, ROLLUP_LEVELS[0])
    for shift_from, level in itertools.pairwise(ROLLUP_LEVELS):
        finer = coarser_rollups(finer, level - shift_from)
        assert finer == rollups_by_bucket(points, level)


@given(points=series_st, level=st.sampled_from(ROLLUP_LEVELS), max_points=budget_st)
def test_reducing_rollups_keeps_the_promises(
    points: list[Point], level: int, max_points: int
) -> None:
    rows = list(rollups_by_bucket(points, level).values())
    kept = minmax_rollup_points(rows, max_points)
    assert len(kept) <= max_points
    assert set(kept) <= set(points)
    assert [p[0] for p in kept] == sorted({p[0] for p in kept})
    assert (kept[0], kept[-1]) == (points[0], points[-1])
    assert min(p[1] for p in points) in [p[1] for p in kept]
    assert max(p[1] for p in points) in [p[1] for p in kept]


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


def test_rollup_level_is_the_coarsest_with_enough_buckets() -> None:
    counts = {6: 5_000, 8: 1_250, 10: 300, 12: 80}
    assert rollup_level(counts, 2_000) == 8  # 999 output buckets
    assert rollup_level(counts, 600) == 10  # 299
    assert rollup_level(counts, 162) == 12  # 80
    assert rollup_level(counts, 20_000) is None
    with pytest.raises(ValueError, match=str(MIN_POINTS)):
        rollup_level(counts, 3)
