"""The outbox relay: publish committed outbox rows to the broker, and publish again the ones
no worker has handled for a while (a broker restart or a killed worker may have lost them).

Publishing happens before the row is marked sent; a crash in between publishes it twice,
which the handlers' exactly-once mark absorbs. Nothing committed is ever left unpublished.
"""

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from crucible.db.engine import transaction
from crucible.db.tables import OutboxMessage

log = logging.getLogger(__name__)

Publish = Callable[[int, str], None]
"""(message id, topic) -> None; raises when the broker cannot take it."""


def relay_once(
    factory: sessionmaker[Session],
    publish: Publish,
    *,
    batch: int = 200,
    republish_after: timedelta = timedelta(seconds=30),
) -> int:
    """Publish unsent rows and stale unhandled ones; returns how many were published."""
    now = datetime.now(UTC)
    published = 0
    with transaction(factory) as session:
        rows = session.scalars(
            select(OutboxMessage)
            .where(
                OutboxMessage.handled_at.is_(None),
                or_(
                    OutboxMessage.sent_at.is_(None),
                    OutboxMessage.sent_at < now - republish_after,
                ),
            )
            .order_by(OutboxMessage.id)
            .limit(batch)
            .with_for_update(skip_locked=True)
        )
        for row in rows:
            try:
                publish(row.id, row.topic)
            except Exception as exc:  # the broker is down: keep the row, try next time
                row.publish_attempts += 1
                row.last_error = f"{type(exc).__name__}: {exc}"[:2000]
                log.warning("outbox relay: broker refused message %d: %s", row.id, exc)
                break
            row.sent_at = now
            row.publish_attempts += 1
            published += 1
    return published


def unhandled_ids(factory: sessionmaker[Session], *, batch: int = 200) -> list[int]:
    """Ids of messages no handler has run yet, oldest first (the in-process worker's queue)."""
    with transaction(factory) as session:
        return list(
            session.scalars(
                select(OutboxMessage.id)
                .where(OutboxMessage.handled_at.is_(None))
                .order_by(OutboxMessage.id)
                .limit(batch)
            )
        )
