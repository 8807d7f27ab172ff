"""A sweep's plan: its settings checked as a whole, the point of every trial by its number,
how many trials to start now, and the best trial so far. Pure: the controller that keeps a
sweep's trials in the database and starts them as runs asks it, and a restarted controller
gets the same answers from the same trials.

    method: random            # grid | random | tpe
    metric: {name: eval/accuracy, goal: maximize}   # eval_suite: arithmetic, for its scores
    budget: {trials: 32, concurrency: 4}
    early_stopping: {min_steps: 100, max_steps: 2700, reduction_factor: 3}   # ASHA; optional
    seed: 0
    parameters: {...}         # sweeps/space.py

Trial n's point is a function of (seed, n) alone under random and the n-th combination
under grid, so restarting never draws a point twice or skips one. Under tpe it is TPE's
answer given the trials finished when it starts (`sweeps/tpe.py`), which the controller
stores with the trial.
"""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crucible.domain.specs import MAX_GRID_POINTS, MAX_SWEEP_TRIALS
from crucible.sweeps.asha import Asha
from crucible.sweeps.samplers import grid_point, grid_size, random_point
from crucible.sweeps.space import Parameter, Point, SearchSpaceError, check_point, parse_space
from crucible.sweeps.tpe import tpe_point

METHODS = ("grid", "random", "tpe")
GOALS = ("maximize", "minimize")


@dataclass(frozen=True)
class TrialResult:
    number: int
    value: float | None
    """The metric's final value; None when the trial reported none."""


@dataclass(frozen=True)
class SweepPlan:
    space: dict[str, Parameter]
    method: str
    metric: str
    goal: str
    trials: int
    concurrency: int
    seed: int
    early_stopping: dict[str, int] | None
    eval_suite: str | None = None
    """Set: the metric is this suite's score `metric` of each trial's checkpoints, at their
    steps; unset: the metric the trials log."""

    def point(self, number: int) -> Point:
        """Trial `number`'s values (0-based) under grid or random; under tpe, the random
        draw that stands for it where the finished trials are not known (checking a
        sweep before it runs)."""
        if not 0 <= number < self.trials:
            raise IndexError(f"trial {number} is outside the budget of {self.trials}")
        if self.method == "grid":
            return grid_point(self.space, number)
        return random_point(self.space, self.seed, number)

    def draw(self, number: int, finished: Sequence[tuple[Point, float]]) -> Point:
        """Trial `number`'s point when it starts: under tpe, TPE's answer given the
        `finished` trials' (point, metric value); otherwise `point(number)`."""
        if self.method != "tpe":
            return self.point(number)
        if not 0 <= number < self.trials:
            raise IndexError(f"trial {number} is outside the budget of {self.trials}")
        return tpe_point(self.space, self.seed, number, finished, goal=self.goal)

    def to_start(self, *, started: int, running: int) -> list[int]:
        """The numbers of the trials to start now: up to `concurrency` running, `trials` in
        all, in order."""
        room = min(self.concurrency - running, self.trials - started)
        return list(range(started, started + max(0, room)))

    def stopper(self) -> Asha | None:
        """ASHA over the sweep's metric, or None without early stopping."""
        if self.early_stopping is None:
            return None
        return Asha(
            metric=self.metric,
            goal=self.goal,
            min_resource=self.early_stopping["min_steps"],
            max_resource=self.early_stopping["max_steps"],
            reduction_factor=self.early_stopping["reduction_factor"],
        )

    def best(self, results: Sequence[TrialResult]) -> TrialResult | None:
        """The trial with the best final value (the lowest number among equals)."""
        sign = -1.0 if self.goal == "maximize" else 1.0
        scored = [
            (sign * r.value, r.number, r)
            for r in results
            if r.value is not None and math.isfinite(r.value)
        ]
        return min(scored)[2] if scored else None


MAX_CHECKED_BYTES = 16 * 2**20
"""Config bytes checking a sweep may read: its trials times its run's config. Each trial's
whole config is copied and checked, so a large config times a thousand trials held a
worker (or a viewer's `POST /manifests/validate`) for minutes."""


def checked_plan(spec: Mapping[str, Any], run_config: Mapping[str, Any]) -> SweepPlan:
    """The plan of a sweep's settings `spec`, with every trial's point applied to the base
    run's config as the job will check it: a SearchSpaceError names the first bad path or
    value, before any trial runs."""
    plan = parse_plan(spec)
    size = len(json.dumps(run_config))
    if plan.trials * size > MAX_CHECKED_BYTES:
        raise SearchSpaceError(
            f"budget.trials={plan.trials} times the run's config of {size} bytes is "
            f"{plan.trials * size} bytes to check, more than the limit of {MAX_CHECKED_BYTES}; "
            "give fewer trials or a smaller config"
        )
    for number in range(plan.trials):
        check_point(run_config, plan.point(number))
    return plan


def parse_plan(spec: Mapping[str, Any]) -> SweepPlan:
    """A sweep spec's plan, or a SearchSpaceError naming the bad key and value."""
    known = {"method", "metric", "budget", "early_stopping", "seed", "parameters"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise SearchSpaceError(f"a sweep takes {', '.join(sorted(known))}; unknown: {unknown}")
    space = parse_space(spec.get("parameters", {}))
    method = spec.get("method", "random")
    if method not in METHODS:
        raise SearchSpaceError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    metric = _section(spec, "metric", required=("name", "goal"), optional=("eval_suite",))
    if not isinstance(metric["name"], str) or not metric["name"]:
        raise SearchSpaceError(f"metric.name must be a metric key, got {metric['name']!r}")
    eval_suite = metric.get("eval_suite")
    if eval_suite is not None and (not isinstance(eval_suite, str) or not eval_suite):
        raise SearchSpaceError(f"metric.eval_suite must be a suite's name, got {eval_suite!r}")
    if metric["goal"] not in GOALS:
        raise SearchSpaceError(f"metric.goal must be maximize or minimize, got {metric['goal']!r}")
    budget = _section(spec, "budget", required=("trials",), optional=("concurrency",))
    trials = _count(budget["trials"], "budget.trials")
    if trials > MAX_SWEEP_TRIALS:
        raise SearchSpaceError(
            f"budget.trials={trials} is more than the limit of {MAX_SWEEP_TRIALS}"
        )
    concurrency = _count(budget.get("concurrency", 1), "budget.concurrency")
    if method == "grid":
        size = grid_size(space)  # a product of counts: the grid itself is never built
        if size > MAX_GRID_POINTS:
            raise SearchSpaceError(
                f"the grid has {size} points (the product of its parameters' value counts), "
                f"more than the limit of {MAX_GRID_POINTS}; give fewer values or use method "
                "random"
            )
        if trials > size:
            raise SearchSpaceError(
                f"budget.trials={trials} is more than the grid's {size} points; give at most "
                f"{size} or use method random"
            )
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SearchSpaceError(f"seed must be an integer, got {seed!r}")
    stopping = None
    if spec.get("early_stopping") is not None:
        given = _section(
            spec,
            "early_stopping",
            required=("min_steps", "max_steps"),
            optional=("reduction_factor",),
        )
        stopping = {
            "min_steps": _count(given["min_steps"], "early_stopping.min_steps"),
            "max_steps": _count(given["max_steps"], "early_stopping.max_steps"),
            "reduction_factor": _count(
                given.get("reduction_factor", 3), "early_stopping.reduction_factor"
            ),
        }
    plan = SweepPlan(
        space=space,
        method=method,
        metric=metric["name"],
        goal=metric["goal"],
        trials=trials,
        concurrency=concurrency,
        seed=seed,
        early_stopping=stopping,
        eval_suite=eval_suite,
    )
    try:
        plan.stopper()  # ASHA checks its own settings
    except ValueError as error:
        raise SearchSpaceError(str(error)) from None
    return plan


def _section(
    spec: Mapping[str, Any], name: str, *, required: Sequence[str], optional: Sequence[str] = ()
) -> Mapping[str, Any]:
    given = spec.get(name)
    if not isinstance(given, Mapping):
        raise SearchSpaceError(f"{name} must be a map with {', '.join(required)}, got {given!r}")
    missing = [key for key in required if key not in given]
    unknown = sorted(set(given) - set(required) - set(optional))
    if missing or unknown:
        raise SearchSpaceError(
            f"{name} takes {', '.join([*required, *optional])}; missing {missing}, "
            f"unknown {unknown}"
        )
    return given


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SearchSpaceError(f"{where} must be a positive integer, got {value!r}")
    return value
