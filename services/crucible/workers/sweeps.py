"""The periodic work: start the next attempt of runs whose backoff is over, treat attempts
that stopped sending heartbeats as hung, and apply checkpoint retention."""

import shutil

from sqlalchemy.orm import Session, sessionmaker

from crucible.artifacts import storage
from crucible.core import recovery, retention, watchdog
from crucible.db.engine import transaction

DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 120.0
"""Four missed SDK heartbeats (sent every 15 s) and some slack for a busy API."""


def promote_recovering(factory: sessionmaker[Session]) -> list[int]:
    """Start the next attempt of runs whose backoff is over (and decide for any Interrupted
    run whose messages came while the facts were half reported)."""
    with transaction(factory) as session:
        recovery.decide_stranded(session)
        return recovery.promote_due(session)


def expire_silent_attempts(
    factory: sessionmaker[Session], timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
) -> list[int]:
    with transaction(factory) as session:
        return watchdog.expire_silent_attempts(session, timeout_seconds=timeout_seconds)


def retire_checkpoints(factory: sessionmaker[Session]) -> int:
    """Apply checkpoint retention; files of `file://` checkpoints go after the commit."""
    with transaction(factory) as session:
        retired = retention.retire_checkpoints(session)
    for checkpoint in retired:
        path = storage.local_path(checkpoint.uri)
        if path is not None and path.exists():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return len(retired)
