"""Checkpoint retention: keep a run's last K checkpoints, and never delete the best one (by
the policy's `best` score), one whose evals are still pending, or one another run reads
(initialised from, evaluated, resumed from).

Deletion is soft first: `deleted_at` commits, then the files go. A crash between the two
leaves files nobody points at (garbage), never a pointer to files that are gone.

Only files in the run's project's own storage are deleted (`core/storage_check.py`): a row
registered before that was checked may name another project's checkpoint or any folder, so
such a checkpoint leaves the record and its files stay where they are.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.checkpoints import BestMode, best_live_checkpoint
from crucible.core.events import TOPIC_CHECKPOINT_REGISTERED, record_event
from crucible.core.storage_check import ownership_problem, session_layout
from crucible.db.tables import Checkpoint, OutboxMessage, Run, RunInput
from crucible.domain import reasons
from crucible.domain.enums import Phase, RunKind
from crucible.domain.resources import TAG_CHECKPOINT
from crucible.domain.specs import TrainingRunManifest, parse_manifest
from crucible.domain.storage_uris import StorageLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retired:
    checkpoint_id: int
    uri: str


def retire_checkpoints(session: Session) -> list[Retired]:
    """Soft-delete every checkpoint the policies no longer keep; returns them, so the caller
    can remove their files once this transaction has committed."""
    candidates = session.execute(
        select(Checkpoint.run_id, func.count())
        .where(Checkpoint.deleted_at.is_(None))
        .group_by(Checkpoint.run_id)
        .having(func.count() > 1)
    ).all()
    layout = session_layout(session)
    retired: list[Retired] = []
    for run_id, _ in candidates:
        # One run whose rows cannot be handled (a manifest that no longer parses) must not
        # hold back every other project's retention. Everything that can fail is read before
        # the first write, so a failure leaves nothing of that run's half done.
        try:
            plan = _plan_for_run(session, session.get_one(Run, run_id), layout)
        except Exception:
            log.exception("run %d: checkpoint retention failed; next tick tries again", run_id)
            continue
        retired.extend(_apply(session, plan))
    return retired


@dataclass(frozen=True)
class _Doomed:
    checkpoint: Checkpoint
    uri_problem: str | None
    """Why its files are not the project's to delete; None: they go."""


@dataclass(frozen=True)
class _Plan:
    run_id: int
    keep_last: int
    doomed: list[_Doomed]


def _plan_for_run(session: Session, run: Run, layout: StorageLayout) -> _Plan:
    manifest = parse_manifest(run.manifest)
    if not isinstance(manifest, TrainingRunManifest):
        return _Plan(run.id, 0, [])
    policy = manifest.spec.checkpoints
    live = list(
        session.scalars(
            select(Checkpoint)
            .where(Checkpoint.run_id == run.id, Checkpoint.deleted_at.is_(None))
            .order_by(Checkpoint.step.desc())
        )
    )
    keep = {c.id for c in live[: policy.keep_last]}
    if policy.best is not None:
        best = _best(session, run.id, policy.best)
        if best is not None:
            keep.add(best)
    if run.resume_checkpoint_id is not None:
        keep.add(run.resume_checkpoint_id)
    doomed = [c for c in live if c.id not in keep]
    if not doomed:
        return _Plan(run.id, policy.keep_last, [])
    in_use = _in_use(session, [c.id for c in doomed], run.project_id)
    return _Plan(
        run.id,
        policy.keep_last,
        [
            _Doomed(
                c,
                ownership_problem(session, layout, project_id=run.project_id, uri=c.uri, run=run),
            )
            for c in doomed
            if c.id not in in_use
        ],
    )


def _apply(session: Session, plan: _Plan) -> list[Retired]:
    now = datetime.now(UTC)
    retired = []
    for doomed in plan.doomed:
        checkpoint = doomed.checkpoint
        checkpoint.deleted_at = now
        data = {"checkpoint_id": checkpoint.id, "step": checkpoint.step}
        if doomed.uri_problem is not None:
            record_event(
                session,
                run_id=plan.run_id,
                type=reasons.EVENT_CHECKPOINT_RETIRED,
                reason="RetentionFilesKept",
                message=f"checkpoint at step {checkpoint.step} retired (keepLast "
                f"{plan.keep_last}); its files were left in place: its URI {doomed.uri_problem}",
                data=data | {"files_kept": True},
            )
            continue
        record_event(
            session,
            run_id=plan.run_id,
            type=reasons.EVENT_CHECKPOINT_RETIRED,
            reason="Retention",
            message=f"checkpoint at step {checkpoint.step} deleted (keepLast {plan.keep_last})",
            data=data,
        )
        retired.append(Retired(checkpoint.id, checkpoint.uri))
    return retired


def _best(session: Session, run_id: int, ranking: str) -> int | None:
    mode, _, metric = ranking.partition(":")
    best = best_live_checkpoint(session, run_id, metric, BestMode(mode))
    return best[0].id if best is not None else None


def _in_use(session: Session, checkpoint_ids: list[int], project_id: int) -> set[int]:
    """Of these checkpoints (of one run of `project_id`), those with evals not yet
    triggered or not finished, or that another run reads."""
    # A run that started from it (initFrom, a rollout policy) keeps it for good, so the run
    # can be reproduced; a finished eval does not.
    readers = session.scalars(
        select(RunInput.checkpoint_id)
        .join(Run, Run.id == RunInput.run_id)
        .where(
            RunInput.checkpoint_id.in_(checkpoint_ids),
            (Run.kind != RunKind.eval.value)
            | Run.phase.not_in([p.value for p in Phase if p.is_terminal]),
        )
    )
    used: set[int] = {c for c in readers if c is not None}
    resuming = session.scalars(
        select(Run.resume_checkpoint_id).where(Run.resume_checkpoint_id.in_(checkpoint_ids))
    )
    used |= {c for c in resuming if c is not None}
    untriggered = session.scalars(
        select(OutboxMessage.payload["checkpoint_id"].as_integer()).where(
            OutboxMessage.topic == TOPIC_CHECKPOINT_REGISTERED, OutboxMessage.handled_at.is_(None)
        )
    )
    used |= {c for c in untriggered if c in checkpoint_ids}
    evaluating = session.scalars(
        select(Run.tags[TAG_CHECKPOINT].as_string()).where(
            Run.kind == RunKind.eval.value,
            Run.phase.not_in([p.value for p in Phase if p.is_terminal]),
            # Only the platform writes the tag, but a row written before that rule held
            # could name any checkpoint: another project's eval never pins this one.
            Run.project_id == project_id,
        )
    )
    used |= {c for c in map(_checkpoint_id, evaluating) if c in checkpoint_ids}
    return used


def _checkpoint_id(tag: str | None) -> int | None:
    """The id an eval run's checkpoint tag names; None for a value that names none (tags
    are free text: a bad one must not stop retention for every project)."""
    if tag is None or not (tag.isascii() and tag.isdigit()) or len(tag) > 18:
        return None
    return int(tag)
