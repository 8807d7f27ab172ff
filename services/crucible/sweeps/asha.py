"""Early stopping by ASHA (asynchronous successive halving, Li et al. 2018): trials report
a metric as they train; at each rung of resource (steps) a trial goes on only if its value
is among the best 1/eta of the values every trial reported at that rung so far, else it is
stopped with the reason. No trial waits for another: the first to reach a rung goes on,
and later ones are judged against those before them.

Rungs sit at min_resource * eta^k steps below max_resource. The state (every trial's value
at every rung) is plain data, so the sweep's controller keeps it beside the sweep and a
restarted controller judges as the first would have.
"""

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Decision:
    go_on: bool
    reason: str | None = None
    """Why the trial was stopped."""


@dataclass
class Asha:
    metric: str
    goal: str
    """"maximize" or "minimize"."""

    min_resource: int
    max_resource: int
    reduction_factor: int = 3
    values: dict[int, dict[str, float]] = field(default_factory=dict)
    """Rung (steps) -> trial -> the metric it reported there."""

    def __post_init__(self) -> None:
        if self.goal not in ("maximize", "minimize"):
            raise ValueError(f"early stopping goal must be maximize or minimize, got {self.goal!r}")
        if isinstance(self.min_resource, bool) or self.min_resource < 1:
            raise ValueError(f"early stopping min_resource must be >= 1, got {self.min_resource!r}")
        if self.max_resource <= self.min_resource:
            raise ValueError(
                f"early stopping max_resource ({self.max_resource!r}) must be above "
                f"min_resource ({self.min_resource!r})"
            )
        if isinstance(self.reduction_factor, bool) or self.reduction_factor < 2:
            raise ValueError(
                f"early stopping reduction_factor must be >= 2, got {self.reduction_factor!r}"
            )

    @property
    def rungs(self) -> list[int]:
        rungs, resource = [], self.min_resource
        while resource < self.max_resource:
            rungs.append(resource)
            resource *= self.reduction_factor
        return rungs

    def report(self, trial: str, step: int, value: float) -> Decision:
        """The trial's `value` of the metric at `step`: judged at every rung it has passed
        and not yet been judged at."""
        for rung in self.rungs:
            if step < rung:
                break
            seen = self.values.setdefault(rung, {})
            if trial in seen:
                continue
            if not math.isfinite(value):
                seen[trial] = value
                return Decision(False, f"{self.metric} is {value} at step {step}")
            seen[trial] = value
            decision = self._judge(trial, rung, step)
            if not decision.go_on:
                return decision
        return Decision(True)

    def _judge(self, trial: str, rung: int, step: int) -> Decision:
        seen = {t: v for t, v in self.values[rung].items() if math.isfinite(v)}
        keep = max(1, len(seen) // self.reduction_factor)
        ranked = sorted(seen.values(), reverse=self.goal == "maximize")
        cutoff = ranked[keep - 1]
        value = seen[trial]
        better_or_equal = value >= cutoff if self.goal == "maximize" else value <= cutoff
        if better_or_equal:
            return Decision(True)
        return Decision(
            False,
            f"stopped by ASHA at step {step} (rung {rung}): {self.metric} {value:.6g} is not "
            f"among the best {keep} of {len(seen)} trials there (cutoff {cutoff:.6g}, "
            f"{self.goal})",
        )

    def state_dict(self) -> dict[str, Any]:
        return {str(rung): dict(seen) for rung, seen in self.values.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = {int(rung): dict(seen) for rung, seen in state.items()}
