"""The outbox relay: publish committed outbox rows to the broker, and publish again the ones
no worker has handled for a while (a broker restart or a killed worker may have lost them).

Publishing happens before the row is marked sent; a crash in between publishes it twice,
which the handlers' exactly-once mark absorbs. Nothing committed is ever left unpublished.

A message usually waits because the workers are behind, not because it was lost, so the
wait before each republish doubles (30 s, 1, 2, 4, 8 min, then every 16 min): on a fixed
period a backlog is copied into the broker again and again, and the workers then have to
read and discard every copy (what that cost is measured in docs/scaling.md).
"""

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session, sessionmaker

from crucible.db.engine import transaction
from crucible.db.tables import OutboxMessage

log = logging.getLogger(__name__)

Publish = Callable[[int, str], None]
"""(message id, topic) -> None; raises when the broker cannot take it."""

REPUBLISH_DOUBLINGS = 5
"""How many times the wait before a republish doubles before it stays the same."""


def relay_once(
    factory: sessionmaker[Session],
    publish: Publish,
    *,
    batch: int = 200,
    republish_after: timedelta = timedelta(seconds=30),
) -> int:
    """Publish unsent rows, then stale unhandled ones; returns how many were published."""
    now = datetime.now(UTC)
    published = 0
    with transaction(factory) as session:
        rows = session.scalars(
            select(OutboxMessage)
            .where(
                OutboxMessage.handled_at.is_(None),
                or_(OutboxMessage.sent_at.is_(None), _presumed_lost(now, republish_after)),
            )
            .order_by(OutboxMessage.sent_at.asc().nulls_first(), OutboxMessage.id)
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


def republish_wait(first_wait: timedelta, publishes: int) -> timedelta:
    """How long a sent, unhandled message waits after its latest publish before the relay
    publishes it again: first_wait x 2^(publishes - 1), at most first_wait x
    2^REPUBLISH_DOUBLINGS. `publishes` counts the broker's refusals too, which only lengthens
    the wait after an outage."""
    return first_wait * (1 << (min(max(publishes, 1), REPUBLISH_DOUBLINGS + 1) - 1))


def _presumed_lost(now: datetime, first_wait: timedelta) -> ColumnElement[bool]:
    """Sent, unhandled, and not republished for its `republish_wait`."""
    sent, publishes = OutboxMessage.sent_at, OutboxMessage.publish_attempts
    waits = [
        and_(publishes == n, sent < now - republish_wait(first_wait, n))
        for n in range(1, REPUBLISH_DOUBLINGS + 1)
    ]
    longest = republish_wait(first_wait, REPUBLISH_DOUBLINGS + 1)
    return or_(*waits, and_(publishes > REPUBLISH_DOUBLINGS, sent < now - longest))


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
