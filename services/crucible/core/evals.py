"""Eval results: the scores a suite gave a checkpoint, optionally produced by an eval run."""

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.checkpoints import load_checkpoint
from crucible.core.events import record_event
from crucible.core.lineage import add_edge, link_checkpoint_input
from crucible.core.runs import load_run
from crucible.db.tables import Checkpoint, EvalResult, Run
from crucible.domain import reasons
from crucible.domain.enums import EdgeRelation, NodeType, Role, RunKind
from crucible.domain.errors import Conflict, InvalidInput, NotFound
from crucible.schemas.lineage import EvalResultCreate, EvalResultPublic


def record_result(
    *, session: Session, principal: Principal, result_in: EvalResultCreate
) -> EvalResultPublic:
    """Record a suite's scores for a checkpoint; the same (checkpoint, suite, eval run) with
    the same scores returns the result already recorded."""
    checkpoint, run = load_checkpoint(
        session, principal, result_in.checkpoint_id, Role.editor, for_update=True
    )
    eval_run = None
    if result_in.eval_run_id is not None:
        eval_run = session.get(Run, result_in.eval_run_id)
        if eval_run is None or eval_run.project_id != run.project_id:
            raise NotFound("run", result_in.eval_run_id)
        if eval_run.kind != RunKind.eval.value:
            raise InvalidInput(
                "eval_run_id",
                result_in.eval_run_id,
                f"run {eval_run.name!r} is a {eval_run.kind} run; "
                "give the id of the eval run that produced these scores",
                location="body",
            )

    existing = session.scalar(
        select(EvalResult).where(
            EvalResult.checkpoint_id == checkpoint.id,
            EvalResult.suite == result_in.suite,
            EvalResult.eval_run_id.is_(None)
            if eval_run is None
            else EvalResult.eval_run_id == eval_run.id,
        )
    )
    if existing is not None:
        if existing.scores == result_in.scores:
            return _public(existing, checkpoint)
        by = f" by eval run {eval_run.id}" if eval_run is not None else ""
        raise Conflict(
            f"checkpoint {checkpoint.id} already has {result_in.suite!r} scores{by} "
            f"({existing.scores}); record a new eval run to score it again"
        )

    result = EvalResult(
        checkpoint_id=checkpoint.id,
        eval_run_id=result_in.eval_run_id,
        suite=result_in.suite,
        scores=result_in.scores,
    )
    session.add(result)
    session.flush()
    result_node = (NodeType.eval_result, result.id)
    add_edge(
        session,
        project_id=run.project_id,
        source=(NodeType.checkpoint, checkpoint.id),
        target=result_node,
        relation=EdgeRelation.scored_by,
    )
    if eval_run is not None:
        add_edge(
            session,
            project_id=run.project_id,
            source=(NodeType.run, eval_run.id),
            target=result_node,
            relation=EdgeRelation.produced,
        )
        if eval_run.id != run.id:  # the eval run read the checkpoint (unless it wrote it)
            link_checkpoint_input(
                session, project_id=run.project_id, checkpoint_id=checkpoint.id, run_id=eval_run.id
            )
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_EVAL_RESULT_RECORDED,
        message=f"{result.suite} scored the checkpoint at step {checkpoint.step}",
        data={
            "eval_result_id": result.id,
            "checkpoint_id": checkpoint.id,
            "suite": result.suite,
            "scores": result.scores,
            "eval_run_id": result.eval_run_id,
        },
    )
    return _public(result, checkpoint)


def list_for_checkpoint(
    *, session: Session, principal: Principal, checkpoint_id: int
) -> list[EvalResultPublic]:
    checkpoint, _ = load_checkpoint(session, principal, checkpoint_id, Role.viewer)
    return _listed(session, _results().where(EvalResult.checkpoint_id == checkpoint.id))


def list_for_run(*, session: Session, principal: Principal, run_id: int) -> list[EvalResultPublic]:
    """Every eval result of every checkpoint the run wrote, in step order."""
    run = load_run(session, principal, run_id, Role.viewer)
    return _listed(session, _results().where(Checkpoint.run_id == run.id))


def _results() -> Select[EvalResult, Checkpoint]:
    return (
        select(EvalResult, Checkpoint)
        .join(Checkpoint, Checkpoint.id == EvalResult.checkpoint_id)
        .order_by(Checkpoint.step, EvalResult.suite, EvalResult.id)
    )


def _listed(session: Session, query: Select[EvalResult, Checkpoint]) -> list[EvalResultPublic]:
    return [_public(result, checkpoint) for result, checkpoint in session.execute(query)]


def _public(result: EvalResult, checkpoint: Checkpoint) -> EvalResultPublic:
    return EvalResultPublic(
        id=result.id,
        checkpoint_id=checkpoint.id,
        run_id=checkpoint.run_id,
        step=checkpoint.step,
        eval_run_id=result.eval_run_id,
        suite=result.suite,
        scores=result.scores,
        created_at=result.created_at,
    )
