"""One sweep's decisions from the state of its trials: which trials to start, which to stop
and why, and whether the sweep is over. It calls nothing: whoever runs the sweep (the
workers' tick, `core/sweep_controller.py`) reads the trials' runs and metric points, asks
`decide`, and starts and cancels runs as it answers; between looks it keeps
`state_dict()`, and a controller loaded from it goes on as this one would.

Every metric point of every trial goes to ASHA once, in step order, ended trials' too
(their values fill the rungs later trials are judged at); only a trial still running can
be stopped, and ASHA sees nothing more of it then. A trial being stopped no longer counts
as running, so its place goes to the next trial at once.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crucible.sweeps.plan import SweepPlan, TrialResult


@dataclass(frozen=True)
class TrialState:
    number: int
    run_id: int
    ended: bool
    """The run is in a final phase (succeeded, failed, cancelled)."""

    points: Sequence[tuple[int, float]]
    """(step, value) of the sweep's metric so far, by step."""

    scored: bool = True
    """Every value of the metric the trial will have is in: false while an eval score of
    one of its checkpoints may still come (`core/sweep_scores.py`), after the run ended."""


@dataclass(frozen=True)
class Stop:
    number: int
    run_id: int
    reason: str


@dataclass(frozen=True)
class Actions:
    start: list[int]
    """Numbers of the trials to start now."""

    stop: list[Stop]
    finished: bool
    """Every trial of the budget has started, ended and been scored."""


class SweepController:
    def __init__(self, plan: SweepPlan) -> None:
        self.plan = plan
        self.asha = plan.stopper()
        self.stopped: dict[int, str] = {}
        """Trial number -> why ASHA stopped it."""
        self._reported: dict[int, int] = {}
        """Trial number -> the last step given to ASHA."""

    def decide(self, trials: Sequence[TrialState]) -> Actions:
        """`trials`: every trial started so far, numbered 0 up."""
        numbers = [t.number for t in trials]
        if numbers != list(range(len(trials))):
            raise ValueError(f"trials must be numbered 0 up in order, got {numbers}")
        stops = [stop for trial in trials if (stop := self._report(trial)) is not None]
        running = sum(1 for t in trials if not t.ended and t.number not in self.stopped)
        return Actions(
            start=self.plan.to_start(started=len(trials), running=running),
            stop=stops,
            finished=len(trials) == self.plan.trials and all(t.ended and t.scored for t in trials),
        )

    def results(self, trials: Sequence[TrialState]) -> list[TrialResult]:
        """Each trial's last value of the metric; None for a trial that logged none, and
        for one ASHA stopped, whose last value is of fewer steps than the others' and so
        not a candidate for the best."""
        return [
            TrialResult(
                t.number,
                t.points[-1][1] if t.points and t.number not in self.stopped else None,
            )
            for t in trials
        ]

    def state_dict(self) -> dict[str, Any]:
        """JSON: ASHA's rungs, the trials stopped and why, the last step seen of each."""
        return {
            "asha": None if self.asha is None else self.asha.state_dict(),
            "stopped": {str(n): reason for n, reason in self.stopped.items()},
            "reported": {str(n): step for n, step in self._reported.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.asha is not None and state.get("asha") is not None:
            self.asha.load_state_dict(state["asha"])
        self.stopped = {int(n): str(reason) for n, reason in state.get("stopped", {}).items()}
        self._reported = {int(n): int(step) for n, step in state.get("reported", {}).items()}

    def last_step_seen(self, number: int) -> int:
        """The last step of trial `number` given to ASHA (-1: none), so that a caller may
        read only the points after it."""
        return self._reported.get(number, -1)

    def _report(self, trial: TrialState) -> Stop | None:
        """The trial's new points to ASHA; the stop, when it is running and stopped now."""
        if self.asha is None or trial.number in self.stopped:
            return None
        last = self._reported.get(trial.number, -1)
        for step, value in trial.points:
            if step <= last:
                continue
            self._reported[trial.number] = step
            decision = self.asha.report(str(trial.number), step, value)
            # A trial that ended before it was judged keeps its values in the rungs.
            if not decision.go_on and not trial.ended:
                reason = decision.reason or "stopped by ASHA"
                self.stopped[trial.number] = reason
                return Stop(trial.number, trial.run_id, reason)
        return None
