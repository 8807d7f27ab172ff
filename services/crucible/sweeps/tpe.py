"""The TPE method (`method: tpe`): each trial's point drawn by Optuna's Tree-structured
Parzen Estimator from the trials that ended before it started, asked in memory.

Optuna keeps no state here: for trial n a throwaway in-memory study is given the finished
trials (their points and the metric's last value; a trial ASHA stopped counts with the
value it was stopped at, as Optuna's own pruned trials inform TPE) and asked once, with a
seed of (sweep seed, n). The same finished trials give the same point, so the draw is
reproducible from what the control plane stores; the point is stored with the trial when
it starts, since later trials change what TPE would answer. Until `startup_trials` have
ended, TPE draws at random (Optuna's startup phase).
"""

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from crucible.sweeps.space import Choice, FloatRange, IntRange, Parameter, Point

STARTUP_TRIALS = 5
"""Random draws before TPE models the results: Optuna's default, 10, is a third of the 32
trials of a typical sweep here."""


def tpe_point(
    space: Mapping[str, Parameter],
    seed: int,
    number: int,
    finished: Sequence[tuple[Point, float]],
    *,
    goal: str,
    startup_trials: int = STARTUP_TRIALS,
) -> Point:
    """Trial `number`'s point from the `finished` trials' (point, value)."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)  # no line per trial told
    distributions = {path: _distribution(p) for path, p in space.items()}
    sampler = optuna.samplers.TPESampler(seed=_seed(seed, number), n_startup_trials=startup_trials)
    direction = (
        optuna.study.StudyDirection.MAXIMIZE
        if goal == "maximize"
        else optuna.study.StudyDirection.MINIMIZE
    )
    study = optuna.create_study(direction=direction, sampler=sampler)
    for point, value in finished:
        if not math.isfinite(value):
            continue
        study.add_trial(
            optuna.trial.create_trial(params=dict(point), distributions=distributions, value=value)
        )
    trial = study.ask(distributions)
    return {path: _plain(trial.params[path]) for path in space}


def _distribution(parameter: Parameter) -> Any:
    import optuna

    if isinstance(parameter, Choice):
        return optuna.distributions.CategoricalDistribution(parameter.values)
    if isinstance(parameter, FloatRange):
        return optuna.distributions.FloatDistribution(
            parameter.low, parameter.high, log=parameter.log
        )
    assert isinstance(parameter, IntRange)
    return optuna.distributions.IntDistribution(parameter.low, parameter.high, log=parameter.log)


def _seed(seed: int, number: int) -> int:
    digest = hashlib.blake2b(f"tpe:{seed}:{number}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def _plain(value: Any) -> Any:
    """NumPy scalars as Python's, for JSON."""
    return value.item() if hasattr(value, "item") else value
