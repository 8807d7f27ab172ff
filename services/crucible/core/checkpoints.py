"""Checkpoints: registered by the run that wrote them, looked up by step, latest or best."""

from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.events import TOPIC_CHECKPOINT_REGISTERED, enqueue, record_event
from crucible.core.lineage import add_edge
from crucible.core.lookups import get_or_404
from crucible.core.pagination import paginate
from crucible.core.runs import load_run
from crucible.db.tables import Attempt, Checkpoint, EvalResult, Run
from crucible.domain import reasons
from crucible.domain.enums import EdgeRelation, NodeType, Role
from crucible.domain.errors import Conflict, NotFound
from crucible.schemas.common import Page
from crucible.schemas.lineage import BestCheckpointPublic, CheckpointCreate, CheckpointPublic


class BestMode(StrEnum):
    max = "max"
    min = "min"


def register_checkpoint(
    *, session: Session, principal: Principal, run_id: int, checkpoint_in: CheckpointCreate
) -> CheckpointPublic:
    """Record a checkpoint; the same (run, step, digest) again returns the one recorded.

    Commits with its lineage edge, a timeline event and the outbox message that lets the
    eval trigger schedule this checkpoint's evals.
    """
    run = load_run(session, principal, run_id, Role.editor)
    # Serialise registrations for this run (Postgres row lock) so a retry racing the original
    # finds it, and latest_step is never lowered by a slower, older report.
    session.refresh(run, with_for_update=True)
    existing = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.step == checkpoint_in.step)
    )
    if existing is not None:
        if existing.digest == checkpoint_in.digest:
            return CheckpointPublic.model_validate(existing)
        raise Conflict(
            f"run {run.id} already has a checkpoint at step {checkpoint_in.step} with digest "
            f"{existing.digest}, not {checkpoint_in.digest}; checkpoints are immutable, so save "
            "this one under another step"
        )
    attempt_id = None
    if checkpoint_in.attempt is not None:
        attempt_id = session.scalar(
            select(Attempt.id).where(
                Attempt.run_id == run.id, Attempt.number == checkpoint_in.attempt
            )
        )
        if attempt_id is None:
            raise NotFound("attempt", f"{run.id}/{checkpoint_in.attempt}")

    checkpoint = Checkpoint(
        run_id=run.id,
        attempt_id=attempt_id,
        step=checkpoint_in.step,
        uri=checkpoint_in.uri,
        digest=checkpoint_in.digest,
        size_bytes=checkpoint_in.size_bytes,
        meta=checkpoint_in.meta,
    )
    session.add(checkpoint)
    if run.latest_step is None or checkpoint.step > run.latest_step:
        run.latest_step = checkpoint.step
    session.flush()
    add_edge(
        session,
        project_id=run.project_id,
        source=(NodeType.run, run.id),
        target=(NodeType.checkpoint, checkpoint.id),
        relation=EdgeRelation.produced,
    )
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_CHECKPOINT_REGISTERED,
        message=f"checkpoint at step {checkpoint.step} registered",
        data={
            "checkpoint_id": checkpoint.id,
            "step": checkpoint.step,
            "attempt": checkpoint_in.attempt,
            "uri": checkpoint.uri,
            "digest": checkpoint.digest,
            "size_bytes": checkpoint.size_bytes,
        },
    )
    enqueue(
        session,
        topic=TOPIC_CHECKPOINT_REGISTERED,
        key=str(checkpoint.id),
        payload={
            "checkpoint_id": checkpoint.id,
            "run_id": run.id,
            "project_id": run.project_id,
            "step": checkpoint.step,
            "uri": checkpoint.uri,
            "digest": checkpoint.digest,
        },
    )
    session.flush()
    return CheckpointPublic.model_validate(checkpoint)


def load_checkpoint(
    session: Session,
    principal: Principal,
    checkpoint_id: int,
    role: Role,
    *,
    for_update: bool = False,
) -> tuple[Checkpoint, Run]:
    """The checkpoint and the run that wrote it, if the caller holds `role` in its project."""
    checkpoint = get_or_404(session, Checkpoint, checkpoint_id, "checkpoint")
    run = session.get_one(Run, checkpoint.run_id)
    principal.require(run.project_id, role, entity="checkpoint", key=checkpoint_id)
    if for_update:
        session.refresh(checkpoint, with_for_update=True)
    return checkpoint, run


def get_checkpoint(
    *, session: Session, principal: Principal, checkpoint_id: int
) -> CheckpointPublic:
    checkpoint, _ = load_checkpoint(session, principal, checkpoint_id, Role.viewer)
    return CheckpointPublic.model_validate(checkpoint)


def list_checkpoints(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    descending: bool = False,
    cursor: str | None = None,
    limit: int = 100,
) -> Page[CheckpointPublic]:
    run = load_run(session, principal, run_id, Role.viewer)
    return paginate(
        session,
        select(Checkpoint).where(Checkpoint.run_id == run.id),
        sort=Checkpoint.step,
        id_column=Checkpoint.id,
        descending=descending,
        cursor=cursor,
        limit=limit,
        to_public=CheckpointPublic.model_validate,
    )


def latest_checkpoint(*, session: Session, principal: Principal, run_id: int) -> CheckpointPublic:
    """The run's highest-step checkpoint that has not been deleted by retention."""
    run = load_run(session, principal, run_id, Role.viewer)
    checkpoint = latest_live_checkpoint(session, run.id)
    if checkpoint is None:
        raise NotFound("latest checkpoint of run", run.id)
    return CheckpointPublic.model_validate(checkpoint)


def latest_live_checkpoint(session: Session, run_id: int) -> Checkpoint | None:
    """The run's highest-step checkpoint not deleted by retention: what `latest` means."""
    return session.scalar(
        select(Checkpoint)
        .where(Checkpoint.run_id == run_id, Checkpoint.deleted_at.is_(None))
        .order_by(Checkpoint.step.desc())
        .limit(1)
    )


def best_checkpoint(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    metric: str,
    mode: BestMode = BestMode.max,
) -> BestCheckpointPublic:
    """The run's live checkpoint whose eval scored highest (or lowest) on `metric`; ties go to
    the later step."""
    run = load_run(session, principal, run_id, Role.viewer)
    row = best_live_checkpoint(session, run.id, metric, mode)
    if row is None:
        raise NotFound(f"checkpoint of run {run.id} with an eval score for", metric)
    checkpoint, eval_result_id, value = row
    public = CheckpointPublic.model_validate(checkpoint)
    return BestCheckpointPublic(
        **public.model_dump(), metric=metric, value=value, eval_result_id=eval_result_id
    )


def best_live_checkpoint(
    session: Session, run_id: int, metric: str, mode: BestMode
) -> tuple[Checkpoint, int, float] | None:
    """(checkpoint, eval result id, score) of the run's live checkpoint that scored best on
    `metric`; ties go to the later step. The one ranking for the API, `best:<metric>`
    references and retention."""
    score = EvalResult.scores[metric].as_float()
    row = session.execute(
        select(Checkpoint, EvalResult.id, score)
        .join(EvalResult, EvalResult.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.run_id == run_id, Checkpoint.deleted_at.is_(None), score.is_not(None))
        .order_by(
            score.desc() if mode is BestMode.max else score.asc(),
            Checkpoint.step.desc(),
            EvalResult.id.desc(),
        )
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1], row[2])
