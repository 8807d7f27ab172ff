"""Recovery: after an attempt ends badly, either schedule the next one (resuming from the latest
good checkpoint, after a backoff) or fail the run when its budget is spent.

Interruptions (preemption, eviction, a lost node, a hung process) and application failures
(non-zero exit, OOM) are counted against separate budgets: a cluster that preempts a run
twenty times must not use up the one retry a genuine bug gets.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible import process_metrics
from crucible.artifacts import remote, storage
from crucible.artifacts.digest import content_of
from crucible.core.events import record_event
from crucible.core.storage_check import ownership_problem, session_layout
from crucible.core.transitions import move_run
from crucible.db.tables import Attempt, Checkpoint, Run, RunEvent
from crucible.domain import reasons
from crucible.domain.enums import AttemptReason, Phase
from crucible.domain.specs import RecoveryPolicy, TrainingRunManifest, parse_manifest
from crucible.domain.storage_uris import location_of

log = logging.getLogger(__name__)

INTERRUPTION_REASONS = frozenset(
    {
        reasons.REASON_PREEMPTED,
        reasons.REASON_EVICTED,
        reasons.REASON_NODE_LOST,
        reasons.REASON_HEARTBEAT_TIMEOUT,
    }
)
_ATTEMPT_REASON_AFTER = {
    reasons.REASON_PREEMPTED: AttemptReason.preemption,
    reasons.REASON_EVICTED: AttemptReason.preemption,
    reasons.REASON_NODE_LOST: AttemptReason.node_lost,
    reasons.REASON_HEARTBEAT_TIMEOUT: AttemptReason.node_lost,
}
MAX_BACKOFF_SECONDS = 60.0
# Digest-check checkpoints up to this size before resuming; larger ones are checked by size
# here and by digest in the workload (the SDK refuses a mismatch before loading).
FULL_VERIFY_MAX_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class Decision:
    retry: bool
    attempt_reason: AttemptReason
    delay_seconds: float
    fail_reason: str
    summary: str
    """e.g. "interruption 2 of 20" — for events and messages."""


def decide(policy: RecoveryPolicy, end_reasons: Sequence[str]) -> Decision:
    """What to do after the last of `end_reasons` (every ended attempt's reason, in order)."""
    last = end_reasons[-1]
    interruption = last in INTERRUPTION_REASONS
    used = sum((r in INTERRUPTION_REASONS) == interruption for r in end_reasons)
    budget = policy.max_interruptions if interruption else policy.max_failures
    kind = "interruption" if interruption else "failure"
    summary = f"{kind} {used} of {budget} allowed"
    if used > budget:
        if interruption:
            fail_reason = reasons.REASON_REACHED_MAX_INTERRUPTIONS
        elif budget == 0:
            fail_reason = last  # the run never had retries: its own reason says most
        else:
            fail_reason = reasons.REASON_REACHED_MAX_FAILURES
        return Decision(False, AttemptReason.failure_retry, 0.0, fail_reason, summary)
    delay = min(policy.backoff_seconds * 2 ** (used - 1), MAX_BACKOFF_SECONDS)
    reason = _ATTEMPT_REASON_AFTER.get(last, AttemptReason.failure_retry)
    return Decision(True, reason, delay, "", summary)


@dataclass(frozen=True)
class Outcome:
    action: str
    """"retry", "fail" or "none" (nothing to recover: a duplicate, or the run moved on)."""
    end_reason: str
    detail: str


def recovery_policy(run: Run) -> RecoveryPolicy:
    manifest = parse_manifest(run.manifest)
    if isinstance(manifest, TrainingRunManifest):
        return manifest.spec.recovery
    return RecoveryPolicy()  # rollouts and evals get the defaults


def decide_at_end(session: Session, run: Run) -> Outcome | None:
    """The decision, in the transaction of the backend's report that completes its facts
    (the attempt ended and the run Interrupted), so the report's answer already says what
    comes next. The checkpoint to resume from is checked for presence and size here; its
    digest is checked by the workers afterwards (`on_attempt_ended`) and by the SDK before
    it loads anything. None when a fact is still missing (the other report decides)."""
    if Phase(run.phase) is not Phase.Interrupted:
        return None
    attempts = _attempts(session, run)
    if not attempts or attempts[-1].end_reason is None:
        return None
    return _decide(session, run, attempts, present_checkpoint)


def on_attempt_ended(session: Session, *, run_id: int, attempt: int) -> Outcome:
    """Handle `attempt.ended` and `run.interrupted`: decide for a run still Interrupted (the
    watchdog's, one that waited for its storage), with the digest checked; after a decision
    taken at the report, check the digest of the checkpoint it chose. Idempotent."""
    run = session.get(Run, run_id, with_for_update=True)
    if run is None:
        return Outcome("none", "", "run gone")
    attempts = _attempts(session, run)
    if not attempts or attempts[-1].number != attempt or attempts[-1].end_reason is None:
        return _verify_chosen(session, run, attempt)
    if Phase(run.phase) is not Phase.Interrupted:
        return _verify_chosen(session, run, attempt)
    return _decide(session, run, attempts, resume_checkpoint)


def _attempts(session: Session, run: Run) -> list[Attempt]:
    return list(
        session.scalars(select(Attempt).where(Attempt.run_id == run.id).order_by(Attempt.number))
    )


def _decide(
    session: Session,
    run: Run,
    attempts: Sequence[Attempt],
    choose: Callable[[Session, Run], Checkpoint | None],
) -> Outcome:
    decision = decide(recovery_policy(run), [a.end_reason or "" for a in attempts])
    last = attempts[-1]
    if not decision.retry:
        move_run(
            session,
            run,
            Phase.Failed,
            decision.fail_reason,
            f"attempt {last.number} ended with {last.end_reason} ({decision.summary}): "
            f"{last.message or 'no message'}",
        )
        process_metrics.RECOVERIES.labels(last.end_reason or "", "fail").inc()
        return Outcome("fail", last.end_reason or "", decision.fail_reason)
    try:
        checkpoint = choose(session, run)
    except remote.StorageUnavailable as exc:
        # Deciding now could only resume from scratch. The run stays Interrupted, untouched,
        # and the stranded-run sweep decides again once the storage answers.
        log.warning("run %d: recovery waits for its checkpoint storage: %s", run.id, exc)
        _note_waiting_for_storage(session, run, str(exc))
        return Outcome("none", "", f"waiting for the checkpoint storage: {exc}")
    now = datetime.now(UTC)
    run.next_attempt_reason = decision.attempt_reason.value
    run.resume_checkpoint_id = checkpoint.id if checkpoint is not None else None
    run.next_attempt_at = now + timedelta(seconds=decision.delay_seconds)
    origin = f"checkpoint at step {checkpoint.step}" if checkpoint is not None else "scratch"
    message = (
        f"attempt {last.number} ended with {last.end_reason} ({decision.summary}); attempt "
        f"{last.number + 1} resumes from {origin} in {decision.delay_seconds:g} s"
    )
    move_run(session, run, Phase.Recovering, last.end_reason or "", message)
    if decision.delay_seconds == 0:
        _promote(session, run)  # no backoff to wait out: the next attempt is due now
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_RECOVERY_SCHEDULED,
        reason=decision.attempt_reason.value,
        message=message,
        data={
            "attempt": last.number + 1,
            "resume_checkpoint_id": run.resume_checkpoint_id,
            "delay_seconds": decision.delay_seconds,
        },
    )
    process_metrics.RECOVERIES.labels(last.end_reason or "", "retry").inc()
    return Outcome("retry", last.end_reason or "", message)


def _verify_chosen(session: Session, run: Run, attempt: int) -> Outcome:
    """Check the digest of the checkpoint the decision after `attempt` chose, once. A damaged
    one is retired; if the next attempt has not started yet it resumes from the newest intact
    one instead, and if it has, its SDK refuses the files before loading them."""
    chosen = run.resume_checkpoint_id
    if chosen is None or run.attempt_count not in (attempt, attempt + 1):
        return Outcome("none", "", f"run is {run.phase}; nothing to recover or verify")
    checkpoint = session.get(Checkpoint, chosen)
    if checkpoint is None or checkpoint.deleted_at is not None or _verified(session, run, chosen):
        return Outcome("none", "", f"checkpoint {chosen} already checked")
    try:
        problem = _confined_problem(session, run, checkpoint, read=True)
    except remote.StorageUnavailable as exc:
        return Outcome("none", "", f"checkpoint {chosen} not checked: {exc}")
    if problem is None:
        record_event(
            session,
            run_id=run.id,
            type=reasons.EVENT_CHECKPOINT_VERIFIED,
            message=f"checkpoint at step {checkpoint.step} matches its registered digest",
            data={"checkpoint_id": checkpoint.id, "step": checkpoint.step},
        )
        return Outcome("none", "", f"checkpoint {chosen} verified")
    _retire_damaged(session, run, checkpoint, problem)
    if run.attempt_count == attempt and Phase(run.phase) in (Phase.Recovering, Phase.Scheduling):
        replacement = resume_checkpoint(session, run)
        run.resume_checkpoint_id = replacement.id if replacement is not None else None
        session.flush()
    return Outcome("none", "", f"checkpoint {chosen} damaged: {problem}")


def _verified(session: Session, run: Run, checkpoint_id: int) -> bool:
    data = session.scalars(
        select(RunEvent.data).where(
            RunEvent.run_id == run.id, RunEvent.type == reasons.EVENT_CHECKPOINT_VERIFIED
        )
    )
    return any(d.get("checkpoint_id") == checkpoint_id for d in data)


def _note_waiting_for_storage(session: Session, run: Run, problem: str) -> None:
    """Tell the run's watchers why it is not recovering, once per wait (the sweep retries
    every few seconds; an event each time would bury the run's history)."""
    latest = session.scalar(
        select(RunEvent.type).where(RunEvent.run_id == run.id).order_by(RunEvent.id.desc())
    )
    if latest != reasons.EVENT_RECOVERY_WAITING:
        record_event(
            session,
            run_id=run.id,
            type=reasons.EVENT_RECOVERY_WAITING,
            reason=reasons.REASON_STORAGE_UNAVAILABLE,
            message=f"recovery waits until the checkpoint storage answers: {problem}",
        )


def decide_stranded(session: Session, *, older_than_seconds: float = 30.0) -> list[Outcome]:
    """A safety net: Interrupted runs nobody decided for (a message handled while the facts
    were half reported) get their decision now."""
    cutoff = datetime.now(UTC) - timedelta(seconds=older_than_seconds)
    stranded = session.execute(
        select(Run.id, Run.attempt_count).where(
            Run.phase == Phase.Interrupted.value, Run.updated_at < cutoff
        )
    ).all()
    return [on_attempt_ended(session, run_id=i, attempt=n) for i, n in stranded]


def promote_due(session: Session, *, now: datetime | None = None) -> list[int]:
    """Move Recovering runs whose backoff has passed to Scheduling, where the backend starts
    their next attempt. Returns their ids."""
    now = now or datetime.now(UTC)
    due = list(
        session.scalars(
            select(Run)
            .where(Run.phase == Phase.Recovering.value, Run.next_attempt_at <= now)
            .with_for_update(skip_locked=True)
        )
    )
    for run in due:
        _promote(session, run)
    return [run.id for run in due]


def _promote(session: Session, run: Run) -> None:
    move_run(
        session,
        run,
        Phase.Scheduling,
        run.next_attempt_reason or "",
        f"starting attempt {run.attempt_count + 1}",
    )


def resume_checkpoint(session: Session, run: Run) -> Checkpoint | None:
    """The run's latest checkpoint whose files are present and intact; a damaged one is
    retired (soft-deleted, with an event) and the one before it is tried."""
    candidates = session.scalars(
        select(Checkpoint)
        .where(Checkpoint.run_id == run.id, Checkpoint.deleted_at.is_(None))
        .order_by(Checkpoint.step.desc())
    )
    for checkpoint in candidates:
        problem = _confined_problem(session, run, checkpoint, read=True)
        if problem is None:
            return checkpoint
        _retire_damaged(session, run, checkpoint, problem)
    return None


def present_checkpoint(session: Session, run: Run) -> Checkpoint | None:
    """The run's latest checkpoint whose files are there with their registered size: what
    can be told without reading them. One that is not is retired, and the one before tried."""
    candidates = session.scalars(
        select(Checkpoint)
        .where(Checkpoint.run_id == run.id, Checkpoint.deleted_at.is_(None))
        .order_by(Checkpoint.step.desc())
    )
    for checkpoint in candidates:
        problem = _confined_problem(session, run, checkpoint, read=False)
        if problem is None:
            return checkpoint
        _retire_damaged(session, run, checkpoint, problem)
    return None


_NOT_READ = "; its files were not read"


def _confined_problem(
    session: Session, run: Run, checkpoint: Checkpoint, *, read: bool
) -> str | None:
    """`checkpoint_problem`, for a checkpoint in the run's project's storage only: one
    registered before URIs were checked may name any file or address, and reading it would
    put that file's size and digest in the run's events, or send requests on a user's word."""
    outside = ownership_problem(
        session, session_layout(session), project_id=run.project_id, uri=checkpoint.uri, run=run
    )
    if outside is not None:
        return f"its URI {outside}{_NOT_READ}"
    return checkpoint_problem(checkpoint, read=read)


def _retire_damaged(session: Session, run: Run, checkpoint: Checkpoint, problem: str) -> None:
    checkpoint.deleted_at = datetime.now(UTC)
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_CHECKPOINT_DAMAGED,
        reason="OutsideProjectStorage" if problem.endswith(_NOT_READ) else "DigestMismatch",
        message=f"checkpoint at step {checkpoint.step} is not resumable: {problem}",
        data={"checkpoint_id": checkpoint.id, "step": checkpoint.step},
    )


def checkpoint_problem(checkpoint: Checkpoint, *, read: bool = True) -> str | None:
    """Why the checkpoint's files cannot be trusted, or None. With `read` False only their
    presence and size are checked, not their digest. The SDK checks the digest again before
    it loads one. Raises `StorageUnavailable` when object storage does not answer: a store
    that is down says nothing about the checkpoint, so nothing is retired for it."""
    if location_of(checkpoint.uri) is None:
        return "its URI is not a file:/// path or an s3:// URI; nothing else is read"
    path = storage.local_path(checkpoint.uri)
    if path is None:
        return _remote_problem(checkpoint, read=read)
    if not path.exists():
        return f"{path} is missing"
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    if size != checkpoint.size_bytes:
        return f"{path} holds {size} bytes, {checkpoint.size_bytes} were registered"
    if read and size <= FULL_VERIFY_MAX_BYTES:
        actual = content_of(path).digest
        if actual != checkpoint.digest:
            return f"{path} has digest {actual}, {checkpoint.digest} was registered"
    return None


def _remote_problem(checkpoint: Checkpoint, *, read: bool) -> str | None:
    try:
        size = remote.size(checkpoint.uri)
        if size is None:
            return f"{checkpoint.uri} is missing"
        if size != checkpoint.size_bytes:
            return f"{checkpoint.uri} holds {size} bytes, {checkpoint.size_bytes} were registered"
        if not read or size > FULL_VERIFY_MAX_BYTES:
            return None
        found = remote.content(checkpoint.uri)
    except remote.StorageUnavailable:
        raise
    except FileNotFoundError:
        return f"{checkpoint.uri} is missing"
    except Exception as exc:  # botocore and aiohttp raise many kinds; all mean "unreachable"
        raise remote.StorageUnavailable(
            f"{checkpoint.uri} cannot be checked: {type(exc).__name__}: {exc}"
        ) from exc
    if found is None:
        return f"{checkpoint.uri} is missing"
    if found.digest != checkpoint.digest:
        return f"{checkpoint.uri} has digest {found.digest}, {checkpoint.digest} was registered"
    return None
