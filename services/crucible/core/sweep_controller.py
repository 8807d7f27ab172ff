"""The sweeps' controller, a tick of the workers (`workers/sweeps.py`, every few seconds):
for each running sweep, the trials' new metric points go to its `SweepController`, and
what it answers is done in the same transaction: the trials it stops are cancelled with
ASHA's reason, the ones it starts are submitted as runs (on the sweep's backend, with its
code), and a sweep whose budget has run ends with its best trial. The controller's state
(ASHA's rungs, the last step seen of each trial) is saved on the sweep, so a worker that
restarts, or another that takes the next tick, decides as this one would have.

A sweep judged by an eval score (`metric.evalSuite`) reads its points from the suite's
results of the trials' checkpoints (`core/sweep_scores.py`) and ends only once the last
of them are in.

A trial that cannot be submitted (a run of its name already there with another spec) fails
the sweep with the reason, its running trials cancelled.
"""

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import SYSTEM
from crucible.core.metrics.history import history
from crucible.core.runs import submit_run
from crucible.core.sweep_scores import Points, awaiting_scores, eval_points
from crucible.core.sweeps import (
    cancel_trials,
    end_sweep,
    scored_rows,
    started_trials,
    trial_rows,
)
from crucible.core.transitions import move_run
from crucible.db.tables import Project, Sweep, SweepTrial
from crucible.domain import reasons
from crucible.domain.enums import Backend, Phase
from crucible.domain.errors import CrucibleError
from crucible.domain.specs import SweepManifest
from crucible.schemas.provenance import CodeSource
from crucible.schemas.runs import RunSubmit
from crucible.sweeps.controller import SweepController, TrialState
from crucible.sweeps.plan import TrialResult, parse_plan
from crucible.sweeps.trials import trial_manifest, trial_tags

log = logging.getLogger(__name__)


def running_sweep_ids(session: Session) -> list[int]:
    return list(session.scalars(select(Sweep.id).where(Sweep.phase == Phase.Running.value)))


def advance_sweep(session: Session, sweep_id: int) -> None:
    """One look at the sweep: stop, start, or end it. Skips a sweep another worker holds."""
    sweep = session.scalar(
        select(Sweep).where(Sweep.id == sweep_id).with_for_update(skip_locked=True)
    )
    if sweep is None or sweep.phase != Phase.Running.value:
        return
    manifest = SweepManifest.model_validate(sweep.manifest)
    plan = parse_plan(manifest.spec.plan_settings())
    controller = SweepController(plan)
    controller.load_state_dict(sweep.state)
    # The metric's last values (or the trials' eval scores) are read once, here: the tick
    # changes neither.
    scores: dict[int, Points] = {}
    awaiting: set[int] = set()
    if plan.eval_suite is not None:
        started = started_trials(session, sweep.id)
        run_ids = [run.id for _, run in started]
        scores = eval_points(session, run_ids, plan.eval_suite, plan.metric)
        awaiting = awaiting_scores(session, run_ids, plan.eval_suite)
        rows = scored_rows(started, scores)
    else:
        rows = trial_rows(session, sweep.id, plan)
    trials = [(trial, run) for trial, run, _, _ in rows]
    last = {trial.number: value for trial, _, _, value in rows}
    states = [
        TrialState(
            number=trial.number,
            run_id=run.id,
            ended=Phase(run.phase).is_terminal,
            points=(
                _new_points(
                    session, run.id, plan.metric, after=controller.last_step_seen(trial.number)
                )
                if plan.eval_suite is None
                else scores.get(run.id, [])
            ),
            scored=run.id not in awaiting,
        )
        for trial, run in trials
    ]
    actions = controller.decide(states)
    by_number = {trial.number: (trial, run) for trial, run in trials}
    for stop in actions.stop:
        trial, run = by_number[stop.number]
        trial.stopped_reason = stop.reason
        if not Phase(run.phase).is_terminal:
            move_run(session, run, Phase.Cancelled, reasons.REASON_STOPPED_BY_SWEEP, stop.reason)
    # Phases as they stand after the stops: a trial stopped now has ended.
    finished = [
        (trial.point, value)
        for trial, run in trials
        if (value := last[trial.number]) is not None
        and Phase(run.phase).is_terminal
        and run.id not in awaiting
    ]
    for number in actions.start:
        try:
            _start_trial(session, sweep, manifest, number, plan.draw(number, finished))
        except (CrucibleError, ValueError) as error:
            message = f"trial {number} could not be submitted: {error}"
            cancel_trials(session, sweep, f"sweep {sweep.name} failed: {message}")
            end_sweep(sweep, Phase.Failed, message)
            break
    if actions.finished:
        _finish(sweep, controller, [t for t, _ in trials], last)
    sweep.state = controller.state_dict()


def _new_points(
    session: Session, run_id: int, metric: str, *, after: int
) -> list[tuple[int, float]]:
    found = history(
        session=session, principal=SYSTEM, run_id=run_id, keys=[metric], step_min=after + 1
    ).series
    if not found:
        return []
    return list(zip(found[0].steps, found[0].values, strict=True))


def _start_trial(
    session: Session, sweep: Sweep, manifest: SweepManifest, number: int, point: dict[str, Any]
) -> None:
    project = session.get(Project, sweep.project_id)
    assert project is not None  # the sweep's foreign key
    run_spec = manifest.spec.run.model_dump(mode="json", by_alias=True, exclude_none=True)
    request = RunSubmit.model_validate(
        {
            "project": project.name,
            "manifest": trial_manifest(sweep.name, run_spec, number, point),
            "backend": Backend(sweep.backend),
            "tags": trial_tags(sweep.name, number, point),
            "code": None if sweep.code is None else CodeSource.model_validate(sweep.code),
        }
    )
    run = submit_run(session=session, principal=SYSTEM, run_in=request)
    session.add(SweepTrial(sweep_id=sweep.id, number=number, run_id=run.id, point=point))
    session.flush()
    log.info("sweep %d (%s): trial %d started as run %d", sweep.id, sweep.name, number, run.id)


def _finish(
    sweep: Sweep,
    controller: SweepController,
    trials: list[SweepTrial],
    last: dict[int, float | None],
) -> None:
    """The best trial by the metric's `last` value (by trial number); a trial the sweep
    stopped is not a candidate (its last value is of fewer steps than the others')."""
    plan = controller.plan
    results = [
        TrialResult(t.number, None if t.number in controller.stopped else last[t.number])
        for t in trials
    ]
    best = plan.best(results)
    if best is None:
        end_sweep(sweep, Phase.Failed, f"no trial ran to its end logging {plan.metric}")
        return
    sweep.best_trial = best.number
    run_id = next(t.run_id for t in trials if t.number == best.number)
    message = f"best: trial {best.number} (run {run_id}), {plan.metric} {best.value:.6g}"
    end_sweep(sweep, Phase.Succeeded, message)
