"""What each outbox topic means to the workers, and the exactly-once wrapper around it.

A handler runs in the same transaction that marks its message handled, so its effects and
the mark commit together: a message delivered twice (a relay retry, a worker killed before
its ack) finds the mark and does nothing.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from crucible.core import eval_trigger, recovery
from crucible.db.engine import transaction
from crucible.db.tables import OutboxMessage, Run
from crucible.domain.enums import Backend, Phase
from crucible.workers import kubernetes, metrics

Handler = Callable[[Session, dict[str, Any]], str]


def _attempt_ended(session: Session, payload: dict[str, Any]) -> str:
    outcome = recovery.on_attempt_ended(
        session, run_id=payload["run_id"], attempt=payload["attempt"]
    )
    if outcome.action != "none":
        metrics.RECOVERIES.labels(outcome.end_reason, outcome.action).inc()
    return outcome.detail


def _checkpoint_registered(session: Session, payload: dict[str, Any]) -> str:
    ids = eval_trigger.on_checkpoint_registered(session, checkpoint_id=payload["checkpoint_id"])
    return f"eval runs {ids}" if ids else "no evals configured"


def _run_submitted(session: Session, payload: dict[str, Any]) -> str:
    if payload.get("backend") != Backend.kubernetes.value:
        return "local run: the executor picks it up"
    run = session.get_one(Run, payload["run_id"])
    if run.k8s_uid is not None:
        return "applied with kubectl: its resource exists"
    if Phase(run.phase).is_terminal:
        return f"run is {run.phase}; no resource needed"
    return kubernetes.create_custom_resource(run)


HANDLERS: dict[str, Handler] = {
    "attempt.ended": _attempt_ended,
    "run.interrupted": _attempt_ended,
    "checkpoint.registered": _checkpoint_registered,
    "run.submitted": _run_submitted,
}
"""Topics without a handler (run.finished) are marked handled: nothing follows from them
yet."""


def handle_message(factory: sessionmaker[Session], message_id: int) -> str:
    """Run the handler of one outbox message, exactly once. Returns what happened."""
    with transaction(factory) as session:
        message = session.get(OutboxMessage, message_id, with_for_update=True)
        if message is None:
            return "no such message"
        if message.handled_at is not None:
            metrics.MESSAGES.labels(message.topic, "duplicate").inc()
            return "already handled"
        handler = HANDLERS.get(message.topic)
        outcome = handler(session, message.payload) if handler is not None else "nothing to do"
        now = datetime.now(UTC)
        message.handled_at = now
        if message.sent_at is None:
            message.sent_at = now
        topic, created_at = message.topic, message.created_at
    # Counted once committed: a rolled-back attempt is retried, not handled.
    metrics.MESSAGES.labels(topic, "handled").inc()
    metrics.HANDLE_LATENCY.labels(topic).observe((datetime.now(UTC) - created_at).total_seconds())
    return outcome
