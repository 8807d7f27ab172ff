"""A sweep's plan: settings checked with the key named, every trial's point a function of
its number, how many trials start now, the best trial."""

import math

import pytest

from crucible.sweeps.plan import TrialResult, parse_plan
from crucible.sweeps.space import SearchSpaceError

SPEC = {
    "method": "random",
    "metric": {"name": "eval/accuracy", "goal": "maximize"},
    "budget": {"trials": 8, "concurrency": 3},
    "early_stopping": {"min_steps": 10, "max_steps": 100},
    "seed": 5,
    "parameters": {
        "config.train.lr": {"min": 1e-4, "max": 1e-1, "log": True},
        "config.train.batch_size": {"values": [8, 16]},
    },
}


def test_a_trials_point_depends_on_its_number_alone() -> None:
    plan = parse_plan(SPEC)
    points = [plan.point(n) for n in range(8)]
    again = parse_plan(SPEC)  # a restarted controller
    assert [again.point(n) for n in reversed(range(8))] == points[::-1]
    assert len({p["config.train.lr"] for p in points}) == 8
    assert parse_plan({**SPEC, "seed": 6}).point(0) != points[0]
    with pytest.raises(IndexError, match="trial 8 is outside the budget of 8"):
        plan.point(8)


def test_a_grid_plan_walks_the_combinations_in_order() -> None:
    spec = {
        **SPEC,
        "method": "grid",
        "budget": {"trials": 4},
        "parameters": {
            "config.train.lr": {"values": [0.1, 0.01]},
            "config.train.batch_size": {"values": [8, 16]},
        },
    }
    plan = parse_plan(spec)
    assert [plan.point(n) for n in range(4)] == [
        {"config.train.lr": 0.1, "config.train.batch_size": 8},
        {"config.train.lr": 0.1, "config.train.batch_size": 16},
        {"config.train.lr": 0.01, "config.train.batch_size": 8},
        {"config.train.lr": 0.01, "config.train.batch_size": 16},
    ]
    with pytest.raises(
        SearchSpaceError, match=r"budget\.trials=5 is more than the grid's 4 points"
    ):
        parse_plan({**spec, "budget": {"trials": 5}})


def test_trials_start_up_to_the_concurrency_and_the_budget() -> None:
    plan = parse_plan(SPEC)  # 8 trials, 3 at once
    assert plan.to_start(started=0, running=0) == [0, 1, 2]
    assert plan.to_start(started=3, running=3) == []
    assert plan.to_start(started=3, running=1) == [3, 4]
    assert plan.to_start(started=7, running=0) == [7]
    assert plan.to_start(started=8, running=0) == []


def test_the_best_trial_follows_the_goal_and_skips_missing_values() -> None:
    results = [
        TrialResult(0, 0.5),
        TrialResult(1, None),
        TrialResult(2, 0.7),
        TrialResult(3, math.nan),
        TrialResult(4, 0.7),
    ]
    assert parse_plan(SPEC).best(results) == TrialResult(2, 0.7)  # the first of equals
    minimize = parse_plan({**SPEC, "metric": {"name": "loss", "goal": "minimize"}})
    assert minimize.best(results) == TrialResult(0, 0.5)
    assert minimize.best([TrialResult(0, None)]) is None


def test_early_stopping_is_asha_over_the_sweeps_metric() -> None:
    stopper = parse_plan(SPEC).stopper()
    assert stopper is not None and stopper.rungs == [10, 30, 90]
    assert (stopper.metric, stopper.goal) == ("eval/accuracy", "maximize")
    assert parse_plan({**SPEC, "early_stopping": None}).stopper() is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": "bayes"}, "method must be one of grid, random, tpe, got 'bayes'"),
        ({"metric": {"name": "loss"}}, r"metric takes name, goal, eval_suite; missing \['goal'\]"),
        ({"metric": {"name": "loss", "goal": "up"}}, "metric.goal must be maximize or minimize"),
        ({"budget": {"trials": 0}}, "budget.trials must be a positive integer, got 0"),
        ({"budget": {"trials": 4, "concurrency": 1.5}}, "budget.concurrency must be a positive"),
        ({"budget": {"trials": 4, "parallel": 2}}, r"unknown \['parallel'\]"),
        (
            {"early_stopping": {"min_steps": 100, "max_steps": 100}},
            r"max_resource \(100\) must be above min_resource \(100\)",
        ),
        ({"seed": "five"}, "seed must be an integer, got 'five'"),
        ({"trials": 3}, r"unknown: \['trials'\]"),
        ({"parameters": {"config.train.nope": {"values": [1]}}}, "config.train has no key 'nope'"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_key(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message):
        parse_plan({**SPEC, **changes})
