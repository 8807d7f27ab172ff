"""Properties of min/max-bucket downsampling: bounded size, extremes and ends always kept."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crucible.domain.downsample import MIN_POINTS, minmax_indices

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
