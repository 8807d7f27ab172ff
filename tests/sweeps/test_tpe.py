"""The TPE method: a point from the finished trials, the same for the same trials and
seed, inside the space, and, once past its random start, closer to the optimum than random
draws on the same objective (deterministic: both are seeded)."""

import math

from crucible.sweeps.plan import parse_plan
from crucible.sweeps.samplers import random_point
from crucible.sweeps.space import Point, parse_space
from crucible.sweeps.tpe import STARTUP_TRIALS, tpe_point

SPACE = parse_space(
    {
        "config.train.lr": {"min": 1.0e-5, "max": 1.0e-1, "log": True},
        "config.train.warmup_steps": {"min": 0, "max": 50},
        "config.train.batch_size": {"values": [16, 32, 64]},
    }
)


def loss(point: Point) -> float:
    """Best at lr 1e-3 and batch size 32; warmup barely matters."""
    lr = math.log10(point["config.train.lr"]) + 3
    return lr**2 + (0.5 if point["config.train.batch_size"] != 32 else 0.0)


def test_the_same_finished_trials_give_the_same_point_inside_the_space() -> None:
    finished = [(random_point(SPACE, 1, n), 0.1 * n) for n in range(8)]
    point = tpe_point(SPACE, 7, 8, finished, goal="minimize")
    assert point == tpe_point(SPACE, 7, 8, finished, goal="minimize")
    assert point != tpe_point(SPACE, 7, 9, finished, goal="minimize")  # another trial's seed
    assert 1.0e-5 <= point["config.train.lr"] <= 1.0e-1
    assert isinstance(point["config.train.warmup_steps"], int)
    assert 0 <= point["config.train.warmup_steps"] <= 50
    assert point["config.train.batch_size"] in (16, 32, 64)


def test_past_its_random_start_tpe_finds_better_points_than_random() -> None:
    finished: list[tuple[Point, float]] = []
    for number in range(30):
        point = tpe_point(SPACE, 0, number, finished, goal="minimize")
        finished.append((point, loss(point)))
    tpe_later = [value for _, value in finished[STARTUP_TRIALS:]]
    random_later = [loss(random_point(SPACE, 0, n)) for n in range(STARTUP_TRIALS, 30)]
    near = 0.6  # within a factor of ~2 of lr 1e-3 at batch size 32
    assert sum(v < near for v in tpe_later) > 2 * sum(v < near for v in random_later)
    assert min(tpe_later) < min(random_later)


def test_tpe_is_a_method_of_the_plan_and_draws_from_the_finished_trials() -> None:
    plan = parse_plan(
        {
            "method": "tpe",
            "metric": {"name": "loss", "goal": "maximize"},
            "budget": {"trials": 4},
            "parameters": {"config.train.lr": {"min": 1.0e-4, "max": 1.0e-2, "log": True}},
        }
    )
    finished = [({"config.train.lr": 1.0e-3}, 0.5)]
    assert plan.draw(1, finished) == tpe_point(plan.space, 0, 1, finished, goal="maximize")
