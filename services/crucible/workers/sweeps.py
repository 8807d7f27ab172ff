"""The periodic work: start the next attempt of runs whose backoff is over, treat attempts
that stopped sending heartbeats as hung, apply checkpoint retention, and advance the
hyperparameter sweeps (`core/sweep_controller.py`)."""

import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from crucible.artifacts import remote, storage
from crucible.core import recovery, retention, runs, sweep_controller, transitions, watchdog
from crucible.db.engine import transaction
from crucible.db.tables import Run
from crucible.domain import reasons
from crucible.domain.enums import TERMINAL_PHASES, Backend, Phase
from crucible.workers import kubernetes

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 120.0
"""Four missed SDK heartbeats (sent every 15 s) and some slack for a busy API."""


def promote_recovering(factory: sessionmaker[Session]) -> list[int]:
    """Start the next attempt of runs whose backoff is over (and decide for any Interrupted
    run whose messages came while the facts were half reported). The operator learns of the
    move from its event feed."""
    with transaction(factory) as session:
        recovery.decide_stranded(session)
        return recovery.promote_due(session)


def advance_sweeps(factory: sessionmaker[Session]) -> int:
    """One look at every running sweep, each in its own transaction, so one whose look
    fails (logged) does not hold the others back; returns how many were looked at."""
    with transaction(factory) as session:
        sweep_ids = sweep_controller.running_sweep_ids(session)
    for sweep_id in sweep_ids:
        try:
            with transaction(factory) as session:
                sweep_controller.advance_sweep(session, sweep_id)
        except Exception:
            log.exception("sweep %d: the controller's look failed; next tick tries again", sweep_id)
    return len(sweep_ids)


def expire_silent_attempts(
    factory: sessionmaker[Session], timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
) -> list[int]:
    with transaction(factory) as session:
        return watchdog.expire_silent_attempts(session, timeout_seconds=timeout_seconds)


def retire_checkpoints(factory: sessionmaker[Session]) -> int:
    """Apply checkpoint retention; the files go after the commit (a store that does not
    answer keeps them: they are no longer registered, so nothing reads them)."""
    with transaction(factory) as session:
        retired = retention.retire_checkpoints(session)
    for checkpoint in retired:
        path = storage.local_path(checkpoint.uri)
        if path is None:
            try:
                remote.remove(checkpoint.uri)
            except Exception:  # botocore and aiohttp raise many kinds; all mean "not now"
                log.warning("could not delete retired checkpoint %s", checkpoint.uri, exc_info=True)
        else:
            storage.remove(path)
    return len(retired)


def repair_drift(factory: sessionmaker[Session], settle_seconds: float = 60.0) -> list[int]:
    """Runs whose custom resource is gone (deleted past its finalizer while no operator
    ran) would wait forever: record them Cancelled, with their open attempt ended."""
    cutoff = datetime.now(UTC) - timedelta(seconds=settle_seconds)
    with transaction(factory) as session:
        candidates = [
            (run.id, run.manifest["kind"], run.k8s_namespace or "", run.k8s_name or "", uid)
            for run in session.scalars(
                select(Run).where(
                    Run.backend == Backend.kubernetes.value,
                    Run.k8s_uid.is_not(None),
                    Run.phase.not_in([p.value for p in TERMINAL_PHASES]),
                    Run.updated_at < cutoff,
                )
            )
            if (uid := run.k8s_uid) is not None
        ]
    present: dict[tuple[str, str], set[str]] = {}
    for _, kind, namespace, _, _ in candidates:
        if (kind, namespace) not in present:
            present[kind, namespace] = kubernetes.existing_uids(kind, namespace)
    gone = [run_id for run_id, kind, ns, _, uid in candidates if uid not in present[kind, ns]]
    with transaction(factory) as session:
        for run_id in gone:
            run = session.get_one(Run, run_id, with_for_update=True)
            if Phase(run.phase).is_terminal:
                continue
            runs.end_open_attempt(session, run, reasons.REASON_RESOURCE_DELETED)
            transitions.move_run(
                session,
                run,
                Phase.Cancelled,
                reasons.REASON_RESOURCE_DELETED,
                f"its {run.manifest['kind']} {run.k8s_namespace}/{run.k8s_name} no longer exists",
            )
    return gone
