"""The run timeline and the transactional outbox: both written inside the caller's transaction."""

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.db.tables import OutboxMessage, RunEvent

# Outbox topics: what the workers follow up (workers/handlers.py maps each to its handler).
TOPIC_RUN_SUBMITTED = "run.submitted"
TOPIC_RUN_INTERRUPTED = "run.interrupted"
TOPIC_RUN_FINISHED = "run.finished"
TOPIC_ATTEMPT_ENDED = "attempt.ended"
TOPIC_CHECKPOINT_REGISTERED = "checkpoint.registered"
TOPIC_DEPLOYMENT_PROMOTED = "deployment.promoted"


def record_event(
    session: Session,
    *,
    run_id: int,
    type: str,
    reason: str = "",
    message: str = "",
    data: dict[str, Any] | None = None,
) -> RunEvent:
    event = RunEvent(run_id=run_id, type=type, reason=reason, message=message, data=data or {})
    session.add(event)
    return event


def enqueue(session: Session, *, topic: str, key: str, payload: dict[str, Any]) -> None:
    """Add a follow-up for the workers; committed or rolled back with the change it follows.

    `key` names this follow-up among the topic's (a run id, `<run>:<attempt>`); the dedupe
    key `<topic>:<key>` makes the enqueue itself idempotent: a retried request that already
    enqueued this follow-up adds nothing.
    """
    dedupe_key = f"{topic}:{key}"
    exists = session.scalar(select(OutboxMessage.id).where(OutboxMessage.dedupe_key == dedupe_key))
    if exists is None:
        session.add(OutboxMessage(topic=topic, dedupe_key=dedupe_key, payload=payload))
