"""What each outbox topic means to the workers, and the exactly-once wrapper around it.

A handler runs in the same transaction that marks its message handled, so its effects and
the mark commit together: a message delivered twice (a relay retry, a worker killed before
its ack) finds the mark and does nothing.
"""

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from crucible.core import deployments, eval_trigger, events, recovery
from crucible.db.engine import transaction
from crucible.db.tables import OutboxMessage, Run
from crucible.domain.enums import Backend, Phase
from crucible.workers import kubernetes, metrics

Handler = Callable[[Session, dict[str, Any]], str]
log = logging.getLogger(__name__)


AfterCommit = Callable[[], object]


def after_commit(session: Session, action: AfterCommit) -> None:
    """Run `action` once this transaction has committed (best effort: what it speeds up is
    also done by a sweep or a later message, so a failure is only logged)."""
    session.info.setdefault(_AFTER_COMMIT, []).append(action)


_AFTER_COMMIT = "crucible.after_commit"


def _attempt_ended(session: Session, payload: dict[str, Any]) -> str:
    return recovery.on_attempt_ended(
        session, run_id=payload["run_id"], attempt=payload["attempt"]
    ).detail


def _checkpoint_registered(session: Session, payload: dict[str, Any]) -> str:
    ids = eval_trigger.on_checkpoint_registered(session, checkpoint_id=payload["checkpoint_id"])
    for run_id in ids:
        run = session.get_one(Run, run_id)
        if run.backend == Backend.kubernetes.value and run.k8s_uid is None:
            # The EvalJob resource now, once its run is committed (so the operator adopts
            # it), rather than one relay round later through `run.submitted`.
            resource = kubernetes.custom_resource(run)
            after_commit(session, partial(kubernetes.create_resource, resource))
    return f"eval runs {ids}" if ids else "no evals configured"


def _run_submitted(session: Session, payload: dict[str, Any]) -> str:
    if payload.get("backend") != Backend.kubernetes.value:
        return "local run: the executor picks it up"
    run = session.get_one(Run, payload["run_id"])
    if run.k8s_uid is not None:  # (no longer enqueued for those; rows from before remain)
        return "applied with kubectl: its resource exists"
    if Phase(run.phase).is_terminal:
        return f"run is {run.phase}; no resource needed"
    return kubernetes.create_custom_resource(run)


def _deployment_promoted(session: Session, payload: dict[str, Any]) -> str:
    superseded = deployments.promotion_superseded(
        session, deployment_id=payload["deployment_id"], event_id=payload["event_id"]
    )
    if superseded:
        return "a later promotion of this deployment replaces it"
    return kubernetes.serve_checkpoint(
        payload["namespace"], payload["name"], payload["checkpoint_id"]
    )


HANDLERS: dict[str, Handler] = {
    events.TOPIC_ATTEMPT_ENDED: _attempt_ended,
    events.TOPIC_RUN_INTERRUPTED: _attempt_ended,
    events.TOPIC_CHECKPOINT_REGISTERED: _checkpoint_registered,
    events.TOPIC_DEPLOYMENT_PROMOTED: _deployment_promoted,
    events.TOPIC_RUN_SUBMITTED: _run_submitted,
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
            log.info("outbox message %d (%s): already handled", message_id, message.topic)
            return "already handled"
        handler = HANDLERS.get(message.topic)
        outcome = handler(session, message.payload) if handler is not None else "nothing to do"
        now = datetime.now(UTC)
        message.handled_at = now
        if message.sent_at is None:
            message.sent_at = now
        topic, created_at = message.topic, message.created_at
        actions: list[AfterCommit] = session.info.pop(_AFTER_COMMIT, [])
    for action in actions:
        try:
            action()
        except Exception:
            log.warning("a follow-up of %s message %s failed", topic, message_id, exc_info=True)
    # Counted and logged once committed: a rolled-back attempt is retried, not handled.
    log.info("outbox message %d (%s) handled: %s", message_id, topic, outcome)
    metrics.MESSAGES.labels(topic, "handled").inc()
    metrics.HANDLE_LATENCY.labels(topic).observe((datetime.now(UTC) - created_at).total_seconds())
    return outcome
