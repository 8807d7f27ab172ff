"""A sweep's trial as a run: the base spec with the trial's point applied to its config,
named `<sweep>-<number>` and tagged with the sweep, the number and each parameter's value,
so `crucible runs ls --tag sweep=<name>` and the dashboard find a sweep's trials."""

import copy
import json
from typing import Any

from crucible.domain import resources
from crucible.domain.specs import MAX_RUN_NAME
from crucible.sweeps.space import Point, apply

SWEEP_TAG = "sweep"
TRIAL_TAG = "sweep.trial"
MAX_SWEEP_NAME = MAX_RUN_NAME - 4
"""A trial's run name is the sweep's, a dash and three digits."""


def trial_name(sweep: str, number: int) -> str:
    return f"{sweep}-{number:03d}"


def trial_manifest(
    sweep: str, run_spec: dict[str, Any], number: int, point: Point
) -> dict[str, Any]:
    """Trial `number`'s TrainingRun manifest: `run_spec` (the sweep's `run`, as JSON) with
    `point` applied to its config."""
    spec = copy.deepcopy(run_spec)
    spec["config"] = apply(spec.get("config") or {}, point)
    return {
        "apiVersion": resources.API_VERSION,
        "kind": "TrainingRun",
        "metadata": {"name": trial_name(sweep, number)},
        "spec": spec,
    }


def trial_tags(sweep: str, number: int, point: Point) -> dict[str, str]:
    tags = {SWEEP_TAG: sweep, TRIAL_TAG: str(number)}
    return tags | {f"sweep.{path}": json.dumps(value) for path, value in point.items()}
