"""Points of a search space: every combination (grid) or seeded random draws."""

import itertools
import math
import random
from collections.abc import Mapping

from crucible.sweeps.space import Choice, FloatRange, IntRange, Parameter, Point, SearchSpaceError


def grid(space: Mapping[str, Parameter]) -> list[Point]:
    """Every combination of the choices, the first path varying slowest. A range has no
    grid of its own: give its values instead."""
    for path, parameter in space.items():
        if not isinstance(parameter, Choice):
            raise SearchSpaceError(
                f"parameter {path!r}: a grid sweeps values, and this is a range; "
                "give {values: [...]} or use method random"
            )
    paths = list(space)
    choices = [space[path].values for path in paths]  # type: ignore[union-attr]
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*choices)]


def random_points(space: Mapping[str, Parameter], count: int, seed: int) -> list[Point]:
    """`count` independent draws, the same for the same seed and space."""
    return [random_point(space, seed, number) for number in range(count)]


def random_point(space: Mapping[str, Parameter], seed: int, number: int) -> Point:
    """Draw `number` of a seeded search: a function of (seed, number) alone, so a restarted
    sweep draws trial n's point again without drawing the ones before it."""
    rng = random.Random(f"{seed}:{number}")  # noqa: S311 - a reproducible search, not a secret
    return {path: draw(parameter, rng) for path, parameter in space.items()}


def draw(parameter: Parameter, rng: random.Random) -> object:
    if isinstance(parameter, Choice):
        return rng.choice(parameter.values)
    if isinstance(parameter, FloatRange):
        if parameter.log:
            return math.exp(rng.uniform(math.log(parameter.low), math.log(parameter.high)))
        return rng.uniform(parameter.low, parameter.high)
    assert isinstance(parameter, IntRange)
    if parameter.log:
        value = math.exp(rng.uniform(math.log(parameter.low), math.log(parameter.high + 1)))
        return min(parameter.high, int(value))
    return rng.randint(parameter.low, parameter.high)
