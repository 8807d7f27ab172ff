"""Served checkpoints: backends report the ones they serve; everyone lists them; editors
promote a checkpoint to one."""

from typing import Annotated

from fastapi import APIRouter, Path, Response

from crucible.api.deps import CurrentPrincipal, Uow
from crucible.api.params import Limit, PathId
from crucible.core import deployments
from crucible.domain.enums import Backend
from crucible.schemas.common import Name
from crucible.schemas.deployments import (
    DeploymentPublic,
    DeploymentReport,
    DeploymentsPublic,
    Promotion,
    PromotionAccepted,
)

router = APIRouter(prefix="/api/v1", tags=["deployments"])

BackendPath = Annotated[Backend, Path(description="The backend serving it.")]
ProjectPath = Annotated[Name, Path(description="The project it serves from.")]
NamePath = Annotated[Name, Path(description="The resource's name: a DNS label.")]


@router.put("/deployments/{backend}/{project}/{name}", operation_id="reportDeployment")
def report_deployment(
    backend: BackendPath,
    project: ProjectPath,
    name: NamePath,
    report: DeploymentReport,
    uow: Uow,
    principal: CurrentPrincipal,
) -> DeploymentPublic:
    """Create or update a served checkpoint as its backend sees it (global admin tokens: the
    operator). Its checkpoint reference is resolved in the project now; one that does not
    resolve is stored with `resolve_error` saying why, and still answers 200."""
    with uow() as session:
        return deployments.report_deployment(
            session=session,
            principal=principal,
            backend=backend,
            project=project,
            name=name,
            report=report,
        )


@router.delete(
    "/deployments/{backend}/{project}/{name}", status_code=204, operation_id="removeDeployment"
)
def remove_deployment(
    backend: BackendPath,
    project: ProjectPath,
    name: NamePath,
    uow: Uow,
    principal: CurrentPrincipal,
) -> Response:
    """Forget a served checkpoint (global admin tokens). Removing one already gone is a 204
    too."""
    with uow() as session:
        deployments.remove_deployment(
            session=session, principal=principal, backend=backend, project=project, name=name
        )
    return Response(status_code=204)


@router.get("/deployments", operation_id="listDeployments")
def list_deployments(
    uow: Uow,
    principal: CurrentPrincipal,
    project: str | None = None,
    cursor: str | None = None,
    limit: Limit = 100,
) -> DeploymentsPublic:
    """The served checkpoints the token may see, newest first."""
    with uow() as session:
        return deployments.list_deployments(
            session=session, principal=principal, project=project, cursor=cursor, limit=limit
        )


@router.get("/deployments/{deployment_id}", operation_id="getDeployment")
def get_deployment(
    deployment_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> DeploymentPublic:
    with uow() as session:
        return deployments.get_deployment(
            session=session, principal=principal, deployment_id=deployment_id
        )


@router.post(
    "/deployments/{deployment_id}/promote", status_code=202, operation_id="promoteCheckpoint"
)
def promote_checkpoint(
    deployment_id: PathId, promotion: Promotion, uow: Uow, principal: CurrentPrincipal
) -> PromotionAccepted:
    """Serve another checkpoint of the deployment's project from it (editor tokens). Accepted,
    not done: a worker sets the ServedModel's `spec.checkpoint` to `{id: checkpoint_id}`, and
    the operator rolls the pods to it one at a time; the deployment's `checkpoint_id` follows
    at its next report. A checkpoint of another project, or one deleted by retention, is a
    422."""
    with uow() as session:
        return deployments.promote_checkpoint(
            session=session, principal=principal, deployment_id=deployment_id, promotion=promotion
        )
