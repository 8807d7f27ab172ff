"""Goodput: productive device-seconds over allocated device-seconds, per run and experiment.

Allocated time is every attempt's duration plus the gaps between attempts (the restart
overhead: the run's quota is held while it waits to come back). Of that, the work an
interrupted or failed attempt did after its last checkpoint is lost, since the next attempt
redoes it; the rest is productive.
"""

from collections import defaultdict
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lookups import get_or_404
from crucible.core.runs import load_run
from crucible.db.tables import Attempt, Checkpoint, Experiment, Run
from crucible.domain import reasons
from crucible.domain.enums import Role
from crucible.schemas.goodput import AttemptGoodput, ExperimentGoodput, RunGoodput

_GOOD_ENDS = {reasons.REASON_COMPLETED, reasons.REASON_CANCELLED_BY_USER}


def run_goodput(*, session: Session, principal: Principal, run_id: int) -> RunGoodput:
    run = load_run(session, principal, run_id, Role.viewer)
    return _for_runs(session, [run])[run.id]


def experiment_goodput(
    *, session: Session, principal: Principal, experiment_id: int
) -> ExperimentGoodput:
    experiment = get_or_404(session, Experiment, experiment_id, "experiment")
    principal.require(experiment.project_id, Role.viewer, entity="experiment", key=experiment_id)
    runs = list(
        session.scalars(
            select(Run).where(Run.experiment_id == experiment.id, Run.attempt_count > 0)
        )
    )
    per_run = _for_runs(session, runs).values()
    allocated = sum(r.allocated_device_s for r in per_run)
    lost = sum(r.work_lost_device_s for r in per_run)
    overhead = sum(r.restart_overhead_device_s for r in per_run)
    return ExperimentGoodput(
        experiment_id=experiment.id,
        runs=len(runs),
        allocated_device_s=allocated,
        productive_device_s=allocated - lost - overhead,
        work_lost_device_s=lost,
        restart_overhead_device_s=overhead,
        goodput=(allocated - lost - overhead) / allocated if allocated > 0 else None,
    )


def _for_runs(session: Session, runs: list[Run]) -> dict[int, RunGoodput]:
    ids = [r.id for r in runs]
    attempts: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in session.scalars(
        select(Attempt).where(Attempt.run_id.in_(ids)).order_by(Attempt.run_id, Attempt.number)
    ):
        attempts[attempt.run_id].append(attempt)
    last_checkpoint = dict(
        session.execute(
            select(Checkpoint.attempt_id, func.max(Checkpoint.created_at))
            .where(Checkpoint.run_id.in_(ids), Checkpoint.attempt_id.is_not(None))
            .group_by(Checkpoint.attempt_id)
        ).all()
    )
    now = datetime.now(UTC)
    result = {}
    for run in runs:
        rows: list[AttemptGoodput] = []
        previous_end: datetime | None = None
        for attempt in attempts[run.id]:
            start = attempt.started_at or attempt.created_at
            end = attempt.ended_at or now
            duration = max((end - start).total_seconds(), 0.0)
            lost = 0.0
            if attempt.ended_at is not None and attempt.end_reason not in _GOOD_ENDS:
                saved = _aware(last_checkpoint.get(attempt.id))
                since = saved if saved is not None and saved > start else start
                lost = min(max((end - since).total_seconds(), 0.0), duration)
            overhead = max((start - previous_end).total_seconds(), 0.0) if previous_end else 0.0
            rows.append(
                AttemptGoodput(
                    number=attempt.number,
                    start_reason=attempt.start_reason,
                    end_reason=attempt.end_reason,
                    duration_s=duration,
                    work_lost_s=lost,
                    restart_overhead_s=overhead,
                )
            )
            previous_end = attempt.ended_at
        devices = max(run.gpus, 1)
        busy = sum(a.duration_s for a in rows) * devices
        overhead_total = sum(a.restart_overhead_s for a in rows) * devices
        lost_total = sum(a.work_lost_s for a in rows) * devices
        allocated = busy + overhead_total
        result[run.id] = RunGoodput(
            run_id=run.id,
            devices=devices,
            attempts=rows,
            allocated_device_s=allocated,
            productive_device_s=allocated - lost_total - overhead_total,
            work_lost_device_s=lost_total,
            restart_overhead_device_s=overhead_total,
            goodput=(allocated - lost_total - overhead_total) / allocated
            if allocated > 0
            else None,
        )
    return result


def _aware(moment: datetime | None) -> datetime | None:
    """MAX() over a timestamp comes back naive from SQLite; the stored values are UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)
