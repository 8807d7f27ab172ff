"""Points of a search space: every combination (grid) or seeded random draws."""

import itertools
import math
import random
from collections.abc import Mapping

from crucible.sweeps.space import Choice, FloatRange, IntRange, Parameter, Point, SearchSpaceError


def grid(space: Mapping[str, Parameter]) -> list[Point]:
    """Every combination of the choices, the first path varying slowest. A range has no
    grid of its own: give its values instead. Sweeps never expand it (`grid_point`)."""
    choices = _choices(space)
    paths = list(choices)
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*choices.values())]


def grid_size(space: Mapping[str, Parameter]) -> int:
    """How many points `grid(space)` has, from the product of the value counts alone."""
    return math.prod(len(values) for values in _choices(space).values())


def grid_point(space: Mapping[str, Parameter], number: int) -> Point:
    """`grid(space)[number]` by index arithmetic: the number's digits in the mixed radix of
    the value counts, the first path the most significant, so nothing is expanded."""
    choices = _choices(space)
    if not 0 <= number < math.prod(len(values) for values in choices.values()):
        raise IndexError(f"point {number} is outside the grid")
    indexes: dict[str, int] = {}
    for path in reversed(list(choices)):
        number, indexes[path] = divmod(number, len(choices[path]))
    return {path: values[indexes[path]] for path, values in choices.items()}


def _choices(space: Mapping[str, Parameter]) -> dict[str, tuple[object, ...]]:
    choices = {}
    for path, parameter in space.items():
        if not isinstance(parameter, Choice):
            raise SearchSpaceError(
                f"parameter {path!r}: a grid sweeps values, and this is a range; "
                "give {values: [...]} or use method random"
            )
        choices[path] = parameter.values
    return choices


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
