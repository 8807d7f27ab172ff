"""The run's state machine applied: one transition with its timestamps, its event and the
follow-ups the outbox carries to the workers."""

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from crucible.core.events import TOPIC_RUN_FINISHED, TOPIC_RUN_INTERRUPTED, enqueue, record_event
from crucible.db.tables import Run
from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.domain.phases import check_transition


def move_run(session: Session, run: Run, phase: Phase, reason: str, message: str) -> None:
    """Apply one state-machine transition with its timestamps, event and follow-up."""
    check_transition(Phase(run.phase), phase)
    now = datetime.now(UTC)
    run.phase, run.reason, run.message = phase.value, reason, message
    if phase is Phase.Running and run.started_at is None:
        run.started_at = now
    if phase is Phase.Interrupted:
        # Recovery's cue. The attempt's end is reported apart (before or after this), so the
        # decision is also triggered by `attempt.ended`; whichever sees both facts decides.
        enqueue(
            session,
            topic=TOPIC_RUN_INTERRUPTED,
            key=f"{run.id}:{run.attempt_count}",
            payload={"run_id": run.id, "attempt": run.attempt_count},
        )
    if phase.is_terminal:
        run.finished_at = now
        enqueue(
            session,
            topic=TOPIC_RUN_FINISHED,
            key=str(run.id),
            payload={"run_id": run.id, "phase": phase.value},
        )
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_PHASE_CHANGED,
        reason=reason,
        message=message,
        data={"phase": phase.value},
    )
    session.flush()
