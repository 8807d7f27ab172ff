"""A sweep's search space: which `config` paths vary and over what, checked before any trial
runs, and a trial's point applied to the base run's config.

    parameters:
      config.train.lr: {min: 1.0e-5, max: 1.0e-2, log: true}   # float range
      config.train.batch_size: {values: [16, 32, 64]}          # a choice
      config.train.warmup_steps: {min: 0, max: 100}             # integers when both ends are

A path names a key of the run's config as the job validates it (`config/parse.py`'s
sections); one it does not know is refused with the path named, and so is a range that no
value can satisfy. Every point the sampler draws is then checked as a whole run config, so
a value a field refuses (a negative learning rate in a range that allows one) fails the
sweep at its start, naming the path, rather than a trial later.
"""

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

from crucible.config.parse import SECTIONS, ConfigError, parse_config_object
from crucible.domain.specs import MAX_SWEEP_PARAMETERS, MAX_SWEEP_VALUES

PREFIX = "config."


class SearchSpaceError(ValueError):
    """A search space that cannot be swept; the sentence names the path."""


@dataclass(frozen=True)
class Choice:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class FloatRange:
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    """Inclusive."""

    log: bool = False


Parameter = Choice | FloatRange | IntRange
Point = dict[str, Any]
"""A trial's values, by path."""


def parse_space(parameters: Mapping[str, Any]) -> dict[str, Parameter]:
    """The sweep's `parameters` as `Parameter`s, every path and range checked."""
    if not isinstance(parameters, Mapping) or not parameters:
        raise SearchSpaceError("a sweep needs parameters: a map of config paths to values")
    if len(parameters) > MAX_SWEEP_PARAMETERS:
        raise SearchSpaceError(
            f"parameters: {len(parameters)} paths is more than the limit of {MAX_SWEEP_PARAMETERS}"
        )
    space = {}
    for path, given in parameters.items():
        check_path(path)
        space[path] = _parameter(path, given)
    return space


def check_path(path: str) -> None:
    """Refuse a path that names no key of a run's config."""
    if not isinstance(path, str) or not path.startswith(PREFIX):
        raise SearchSpaceError(f"parameter {path!r}: a path starts with {PREFIX!r}")
    parts = path[len(PREFIX) :].split(".")
    section = SECTIONS.get(parts[0])
    if section is None:
        raise SearchSpaceError(
            f"parameter {path!r}: config has no section {parts[0]!r} "
            f"(known: {', '.join(sorted(SECTIONS))})"
        )
    model: Any = section
    for depth, part in enumerate(parts[1:], start=1):
        fields = _fields(model)
        if fields is None:
            return  # a free-form map (options, suite): its keys are the plugin's to check
        if part not in fields:
            where = PREFIX + ".".join(parts[:depth])
            raise SearchSpaceError(
                f"parameter {path!r}: {where} has no key {part!r} (known: "
                f"{', '.join(sorted(fields))})"
            )
        model = fields[part]
    if len(parts) == 1:
        raise SearchSpaceError(f"parameter {path!r} names a whole section, not a key of it")


def _fields(annotation: Any) -> dict[str, Any] | None:
    """A model's fields with their annotations; None for a free-form value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            if candidate.model_config.get("extra") == "allow":
                return None  # keyword arguments of a plugin, checked by its signature
            return {name: f.annotation for name, f in candidate.model_fields.items()}
    return None


def _parameter(path: str, given: Any) -> Parameter:
    if not isinstance(given, Mapping):
        raise SearchSpaceError(
            f"parameter {path!r}: give {{values: [...]}} or {{min: ..., max: ...}}, got {given!r}"
        )
    keys = set(given)
    if "values" in keys:
        if keys - {"values"}:
            raise SearchSpaceError(
                f"parameter {path!r}: values takes no {sorted(keys - {'values'})}"
            )
        values = given["values"]
        if not isinstance(values, list) or not values:
            raise SearchSpaceError(f"parameter {path!r}: values must be a non-empty list")
        if len(values) > MAX_SWEEP_VALUES:
            raise SearchSpaceError(
                f"parameter {path!r}: {len(values)} values is more than the limit of "
                f"{MAX_SWEEP_VALUES}"
            )
        return Choice(tuple(values))
    unknown = keys - {"min", "max", "log"}
    if unknown or not {"min", "max"} <= keys:
        raise SearchSpaceError(
            f"parameter {path!r}: a range takes min, max and log, got {sorted(keys)}"
        )
    low, high, log = given["min"], given["max"], given.get("log", False)
    for name, value in (("min", low), ("max", high)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise SearchSpaceError(
                f"parameter {path!r}: {name} must be a finite number, got {value!r}"
            )
    if not isinstance(log, bool):
        raise SearchSpaceError(f"parameter {path!r}: log must be true or false, got {log!r}")
    if not low < high:
        raise SearchSpaceError(f"parameter {path!r}: min {low!r} must be below max {high!r}")
    if log and low <= 0:
        raise SearchSpaceError(f"parameter {path!r}: a log range needs min > 0, got {low!r}")
    if isinstance(low, int) and isinstance(high, int):
        return IntRange(low, high, log)
    return FloatRange(float(low), float(high), log)


def apply(config: Mapping[str, Any], point: Point) -> dict[str, Any]:
    """A copy of the run's `config` with the point's values set at their paths."""
    result = copy.deepcopy(dict(config))
    for path, value in point.items():
        keys = path[len(PREFIX) :].split(".")
        node = result
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise SearchSpaceError(
                    f"parameter {path!r}: the base config's {key!r} is {child!r}, not a map"
                )
            node = child
        node[keys[-1]] = value
    return result


def check_point(config: Mapping[str, Any], point: Point) -> None:
    """Refuse a point whose values the run's config does not take, naming the paths."""
    try:
        parse_config_object(apply(config, point))
    except ConfigError as error:
        values = ", ".join(f"{path}={value!r}" for path, value in point.items())
        raise SearchSpaceError(f"the point {values} makes a bad run config: {error}") from error
