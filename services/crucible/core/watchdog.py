"""The heartbeat watchdog: an attempt whose workload stopped sending heartbeats is hung.

Only attempts that have sent at least one heartbeat are judged, so a workload that does not
use the SDK is never mistaken for a hung one. The attempt is ended as HeartbeatTimeout (an
interruption, so recovery resumes the run from its latest checkpoint) and the backend stops
whatever is left of its processes when it sees the run is no longer Running.
"""

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import SYSTEM
from crucible.core.runs import end_attempt
from crucible.core.transitions import move_run
from crucible.db.tables import Attempt, Run
from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.schemas.runs import AttemptEnd


def expire_silent_attempts(
    session: Session, *, timeout_seconds: float, now: datetime | None = None
) -> list[int]:
    """End the attempts of Running runs silent for `timeout_seconds`; returns their run ids."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=timeout_seconds)
    silent = session.execute(
        select(Attempt, Run)
        .join(Run, Run.id == Attempt.run_id)
        .where(
            Attempt.ended_at.is_(None),
            Attempt.heartbeat_at < cutoff,
            Run.phase == Phase.Running.value,
        )
    ).all()
    for attempt, run in silent:
        message = (
            f"no heartbeat from attempt {attempt.number} since "
            f"{attempt.heartbeat_at:%H:%M:%S} UTC (timeout {timeout_seconds:g} s); treated as hung"
        )
        end_attempt(
            session=session,
            principal=SYSTEM,
            run_id=run.id,
            number=attempt.number,
            attempt_in=AttemptEnd(end_reason=reasons.REASON_HEARTBEAT_TIMEOUT, message=message),
        )
        move_run(session, run, Phase.Interrupted, reasons.REASON_HEARTBEAT_TIMEOUT, message)
    return [run.id for _, run in silent]
