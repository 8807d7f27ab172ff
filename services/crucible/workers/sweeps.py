"""The periodic work: start the next attempt of runs whose backoff is over, and treat
attempts that stopped sending heartbeats as hung."""

from sqlalchemy.orm import Session, sessionmaker

from crucible.core import recovery, watchdog
from crucible.db.engine import transaction

DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 120.0
"""Four missed SDK heartbeats (sent every 15 s) and some slack for a busy API."""


def promote_recovering(factory: sessionmaker[Session]) -> list[int]:
    with transaction(factory) as session:
        return recovery.promote_due(session)


def expire_silent_attempts(
    factory: sessionmaker[Session], timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
) -> list[int]:
    with transaction(factory) as session:
        return watchdog.expire_silent_attempts(session, timeout_seconds=timeout_seconds)
