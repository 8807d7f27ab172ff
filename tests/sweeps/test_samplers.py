"""Points of a search space: the grid's every combination, random draws inside their
ranges and repeatable by seed."""

import math

import pytest

from crucible.sweeps.samplers import grid, random_points
from crucible.sweeps.space import Choice, FloatRange, IntRange, SearchSpaceError


def test_the_grid_is_every_combination_first_path_slowest() -> None:
    points = grid({"config.train.lr": Choice((0.1, 0.01)), "config.train.steps": Choice((1, 2, 3))})
    assert points == [
        {"config.train.lr": lr, "config.train.steps": steps}
        for lr in (0.1, 0.01)
        for steps in (1, 2, 3)
    ]


def test_a_grid_over_a_range_is_refused_naming_it() -> None:
    with pytest.raises(SearchSpaceError, match=r"'config\.train\.lr': a grid sweeps values"):
        grid({"config.train.lr": FloatRange(0.0, 1.0)})


def test_random_points_stay_in_range_and_repeat_by_seed() -> None:
    space = {
        "config.train.lr": FloatRange(1e-5, 1e-1, log=True),
        "config.train.warmup_steps": IntRange(0, 4),
        "config.train.batch_size": Choice((8, 16)),
        "config.train.weight_decay": FloatRange(0.0, 0.5),
        "config.train.steps": IntRange(10, 1000, log=True),
    }
    points = random_points(space, 400, seed=3)
    assert points == random_points(space, 400, seed=3)
    assert points != random_points(space, 400, seed=4)
    lrs = [p["config.train.lr"] for p in points]
    assert all(1e-5 <= lr <= 1e-1 for lr in lrs)
    # Log-uniform: about as many draws in each decade.
    per_decade = [sum(1 for lr in lrs if 10**d <= lr < 10 ** (d + 1)) for d in range(-5, -1)]
    assert min(per_decade) > 60, per_decade
    assert {p["config.train.warmup_steps"] for p in points} == {0, 1, 2, 3, 4}
    assert {p["config.train.batch_size"] for p in points} == {8, 16}
    assert all(0.0 <= p["config.train.weight_decay"] <= 0.5 for p in points)
    steps = [p["config.train.steps"] for p in points]
    assert all(isinstance(s, int) and 10 <= s <= 1000 for s in steps)
    assert sum(1 for s in steps if s < 100) > 120  # half the log range is below 100
    assert not any(math.isnan(lr) for lr in lrs)
