"""Served checkpoints: each backend (the operator) reports the ones it serves, and the API
lists them with the checkpoint each serves.

Every report resolves the resource's checkpoint reference again, in the resource's project,
so a deployment that follows a run's `latest` or `best:<metric>` learns here which checkpoint
that is now; the operator rolls its pods when it differs from the one they serve. A reference
that does not resolve is stored with the reason, not refused: the operator shows the reason
on the resource, and the next report may resolve it.

A promotion (an editor asking a deployment to serve another checkpoint) changes nothing here:
it is recorded on the checkpoint's run and handed to the workers, which set the ServedModel's
`spec.checkpoint`; the operator's next report then carries the new reference.
"""

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.checkpoints import BestMode, best_live_checkpoint, latest_live_checkpoint
from crucible.core.events import TOPIC_DEPLOYMENT_PROMOTED, enqueue, record_event
from crucible.core.inputs import CHECKPOINT_PRODUCER_KINDS, producer_named
from crucible.core.lookups import get_or_404, listed_project_id, project_by_name
from crucible.core.pagination import paginate
from crucible.db.tables import Checkpoint, Deployment, OutboxMessage, Project, Run
from crucible.db.types import utcnow
from crucible.db.upsert import insert_statement
from crucible.domain import reasons
from crucible.domain.enums import Backend, Role
from crucible.domain.errors import Conflict, InvalidInput
from crucible.domain.specs import CheckpointRef
from crucible.schemas.deployments import (
    CheckpointBrief,
    DeploymentPublic,
    DeploymentReport,
    DeploymentsPublic,
    Promotion,
    PromotionAccepted,
)


def report_deployment(
    *,
    session: Session,
    principal: Principal,
    backend: Backend,
    project: str,
    name: str,
    report: DeploymentReport,
) -> DeploymentPublic:
    """Create or update the deployment `name` of `project` on `backend` (global admin)."""
    principal.require_global_admin()
    owner = project_by_name(session, project)
    resolved, resolve_error = _resolve(session, owner, report.checkpoint)
    values: dict[str, Any] = {
        "uid": report.uid,
        "checkpoint_ref": report.checkpoint.model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
        "checkpoint_id": None if resolved is None else resolved.id,
        "resolve_error": resolve_error,
        "serving_checkpoint_id": _serving_checkpoint_id(session, owner, report),
        "replicas": report.replicas,
        "ready_replicas": report.ready_replicas,
        "phase": report.phase.value,
        "message": report.message,
        "url": report.url,
    }
    key = {"project_id": owner.id, "backend": backend.value, "name": name}
    now = utcnow()
    # Insert-if-absent, then update under a row lock: two first reports racing each other
    # both end in the one row, neither in a unique-constraint error.
    session.execute(
        insert_statement(session, Deployment)
        .values(**key, **values, created_at=now, updated_at=now)
        .on_conflict_do_nothing()
    )
    row = session.scalars(select(Deployment).filter_by(**key).with_for_update()).one()
    for column, value in values.items():
        setattr(row, column, value)
    row.updated_at = now
    session.flush()
    return _publics(session, [row])[0]


def remove_deployment(
    *, session: Session, principal: Principal, backend: Backend, project: str, name: str
) -> None:
    """Forget the deployment (global admin). One already gone, or whose project is gone,
    is not an error: the operator calls this from a finalizer, which must be able to finish."""
    principal.require_global_admin()
    owner = session.scalar(select(Project).where(Project.name == project))
    if owner is None:
        return
    session.execute(
        delete(Deployment).where(
            Deployment.project_id == owner.id,
            Deployment.backend == backend.value,
            Deployment.name == name,
        )
    )


def list_deployments(
    *, session: Session, principal: Principal, project: str | None, cursor: str | None, limit: int
) -> DeploymentsPublic:
    """The deployments the caller may see, newest first."""
    query = select(Deployment)
    if (project_id := listed_project_id(session, principal, project)) is not None:
        query = query.where(Deployment.project_id == project_id)
    page = paginate(
        session,
        query,
        sort=Deployment.created_at,
        id_column=Deployment.id,
        descending=True,
        cursor=cursor,
        limit=limit,
        to_public=lambda row: row,
    )
    return DeploymentsPublic(items=_publics(session, page.items), next_cursor=page.next_cursor)


def get_deployment(
    *, session: Session, principal: Principal, deployment_id: int
) -> DeploymentPublic:
    row = get_or_404(session, Deployment, deployment_id, "deployment")
    principal.require(row.project_id, Role.viewer, entity="deployment", key=deployment_id)
    return _publics(session, [row])[0]


def promote_checkpoint(
    *, session: Session, principal: Principal, deployment_id: int, promotion: Promotion
) -> PromotionAccepted:
    """Ask a deployment to serve a checkpoint of its project (editor). From then on its
    reference is that checkpoint's id: one that followed a run's latest or best stops
    following it."""
    row = get_or_404(session, Deployment, deployment_id, "deployment")
    principal.require(row.project_id, Role.editor, entity="deployment", key=deployment_id)
    if row.backend != Backend.kubernetes.value:
        raise Conflict(
            f"deployment {deployment_id} is served by the {row.backend} backend; only a "
            "Kubernetes ServedModel can be promoted here: restart the local one on the checkpoint"
        )
    # Promotions of one deployment queue here, so the one committed last also has the highest
    # outbox id: how the worker tells a stale promotion from the one to serve.
    session.refresh(row, with_for_update=True)
    project = session.get_one(Project, row.project_id)
    checkpoint, why_not = _resolve(session, project, CheckpointRef(id=promotion.checkpoint_id))
    if checkpoint is None:
        assert why_not is not None
        raise InvalidInput("checkpoint_id", promotion.checkpoint_id, why_not, location="body")
    accepted = PromotionAccepted(
        deployment_id=row.id,
        checkpoint_id=checkpoint.id,
        namespace=project.namespace,
        name=row.name,
    )
    event = record_event(
        session,
        run_id=checkpoint.run_id,
        type=reasons.EVENT_CHECKPOINT_PROMOTED,
        message=f"checkpoint at step {checkpoint.step} promoted to deployment {row.name!r}",
        data={
            **accepted.model_dump(),
            "serving_checkpoint_id": row.serving_checkpoint_id,
            "token_id": principal.token_id,
        },
    )
    session.flush()
    enqueue(
        session,
        topic=TOPIC_DEPLOYMENT_PROMOTED,
        key=_promotion_key(row.id, event.id),
        payload={**accepted.model_dump(), "event_id": event.id},
    )
    session.flush()
    return accepted


def promotion_superseded(session: Session, *, deployment_id: int, event_id: int) -> bool:
    """Whether a later promotion of the deployment was enqueued after this one: messages may
    be handled out of order, and a stale one must not undo the newer."""
    prefix = f"{TOPIC_DEPLOYMENT_PROMOTED}:{_promotion_key(deployment_id, '')}"
    newest = session.scalar(
        select(OutboxMessage.dedupe_key)
        .where(
            OutboxMessage.topic == TOPIC_DEPLOYMENT_PROMOTED,
            OutboxMessage.dedupe_key.startswith(prefix),
        )
        .order_by(OutboxMessage.id.desc())
        .limit(1)
    )
    return newest is not None and newest != prefix + str(event_id)


def _promotion_key(deployment_id: int, event_id: int | str) -> str:
    """Unique per promotion (by its event), so promoting A, then B, then A again is three."""
    return f"{deployment_id}:{event_id}"


def _resolve(
    session: Session, project: Project, ref: CheckpointRef
) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint `ref` names in `project` now, or None and a sentence saying why not."""
    if ref.id is not None:
        checkpoint = _checkpoint_in(session, project, ref.id)
        if checkpoint is None:
            return None, f"checkpoint {ref.id} does not exist in project {project.name!r}"
        if checkpoint.deleted_at is not None:
            return None, f"checkpoint {ref.id} was deleted by retention; name another checkpoint"
        return checkpoint, None
    assert ref.run is not None  # the spec demands exactly one source
    run = producer_named(session, project.id, ref.run, CHECKPOINT_PRODUCER_KINDS)
    if run is None:
        return None, f"run {ref.run!r} does not exist in project {project.name!r}"
    if ref.checkpoint == "latest":
        checkpoint = latest_live_checkpoint(session, run.id)
        if checkpoint is None:
            return None, f"run {ref.run!r} has no checkpoint yet"
        return checkpoint, None
    metric = ref.checkpoint.removeprefix("best:")
    best = best_live_checkpoint(session, run.id, metric, BestMode.max)
    if best is None:
        return None, f"no checkpoint of run {ref.run!r} has an eval score for {metric!r} yet"
    return best[0], None


def _checkpoint_in(session: Session, project: Project, checkpoint_id: int) -> Checkpoint | None:
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None or session.get_one(Run, checkpoint.run_id).project_id != project.id:
        return None
    return checkpoint


def _serving_checkpoint_id(
    session: Session, project: Project, report: DeploymentReport
) -> int | None:
    """The reported serving checkpoint; None when it is no longer registered (its run was
    deleted while pods still serve it), so the report is not refused for what the pods run."""
    checkpoint_id = report.serving_checkpoint_id
    if checkpoint_id is None:
        return None
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        return None
    if session.get_one(Run, checkpoint.run_id).project_id != project.id:
        raise InvalidInput(
            "serving_checkpoint_id",
            checkpoint_id,
            f"is a checkpoint of another project, not of {project.name!r}",
            location="body",
        )
    return checkpoint_id


def _publics(session: Session, rows: list[Deployment]) -> list[DeploymentPublic]:
    """Rows as the API shows them, with their projects and checkpoints read in one query each."""
    project_names: dict[int, str] = {
        project_id: name
        for project_id, name in session.execute(
            select(Project.id, Project.name).where(Project.id.in_({row.project_id for row in rows}))
        )
    }
    checkpoint_ids = {
        checkpoint_id
        for row in rows
        for checkpoint_id in (row.checkpoint_id, row.serving_checkpoint_id)
        if checkpoint_id is not None
    }
    briefs = {
        checkpoint.id: CheckpointBrief(
            id=checkpoint.id,
            run_id=checkpoint.run_id,
            run_name=run_name,
            step=checkpoint.step,
            uri=checkpoint.uri,
        )
        for checkpoint, run_name in session.execute(
            select(Checkpoint, Run.name)
            .join(Run, Run.id == Checkpoint.run_id)
            .where(Checkpoint.id.in_(checkpoint_ids))
        )
    }
    return [
        DeploymentPublic(
            id=row.id,
            project=project_names[row.project_id],
            backend=Backend(row.backend),
            name=row.name,
            uid=row.uid,
            checkpoint=CheckpointRef.model_validate(row.checkpoint_ref),
            checkpoint_id=row.checkpoint_id,
            resolved=briefs.get(row.checkpoint_id) if row.checkpoint_id else None,
            resolve_error=row.resolve_error,
            serving_checkpoint_id=row.serving_checkpoint_id,
            serving=briefs.get(row.serving_checkpoint_id) if row.serving_checkpoint_id else None,
            replicas=row.replicas,
            ready_replicas=row.ready_replicas,
            phase=row.phase,
            message=row.message,
            url=row.url,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
        for row in rows
    ]
