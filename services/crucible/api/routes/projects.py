from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Response

from crucible.api.deps import NO_STORE, CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import Limit, PathId
from crucible.core import projects, tokens
from crucible.schemas.common import Deleted, Page
from crucible.schemas.tenancy import (
    ExperimentCreate,
    ExperimentPublic,
    ExperimentUpdate,
    ProjectCreate,
    ProjectPublic,
    ProjectUpdate,
    TokenCreate,
    TokenCreated,
    TokenPublic,
)

router = APIRouter(prefix="/api/v1")
Force = Annotated[bool, Query(description="Also delete the runs it holds.")]


@router.post("/projects", status_code=201, operation_id="createProject", tags=["projects"])
def create_project(body: ProjectCreate, uow: Uow, principal: CurrentPrincipal) -> ProjectPublic:
    with uow() as session:
        return projects.create_project(session=session, principal=principal, project_in=body)


@router.get("/projects", operation_id="listProjects", tags=["projects"])
def list_projects(
    uow: Uow, principal: CurrentPrincipal, cursor: str | None = None, limit: Limit = 100
) -> Page[ProjectPublic]:
    with uow() as session:
        return projects.list_projects(
            session=session, principal=principal, cursor=cursor, limit=limit
        )


@router.get("/projects/{project_id}", operation_id="getProject", tags=["projects"])
def get_project(project_id: PathId, uow: Uow, principal: CurrentPrincipal) -> ProjectPublic:
    with uow() as session:
        return projects.get_project(session=session, principal=principal, project_id=project_id)


@router.patch("/projects/{project_id}", operation_id="updateProject", tags=["projects"])
def update_project(
    project_id: PathId, body: ProjectUpdate, uow: Uow, principal: CurrentPrincipal
) -> ProjectPublic:
    with uow() as session:
        return projects.update_project(
            session=session, principal=principal, project_id=project_id, project_in=body
        )


@router.delete("/projects/{project_id}", operation_id="deleteProject", tags=["projects"])
def delete_project(
    project_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    settings: SettingsDep,
    force: Force = False,
) -> Deleted:
    # With `force`, its runs go too: their logs, outputs and MLflow artifacts once the
    # deletion has committed (not before: a failed commit would leave runs without files).
    with uow() as session:
        leftovers = projects.delete_project(
            session=session, principal=principal, project_id=project_id, force=force
        )
    projects.remove_leftovers(
        leftovers, home=settings.home, mlflow_artifact_root=settings.resolved_mlflow_artifact_root
    )
    return Deleted(id=project_id)


@router.post("/tokens", status_code=201, operation_id="createToken", tags=["tokens"])
def create_token(
    body: TokenCreate,
    uow: Uow,
    principal: CurrentPrincipal,
    settings: SettingsDep,
    response: Response,
) -> TokenCreated:
    response.headers["Cache-Control"] = NO_STORE  # the body is a credential
    days = settings.token_max_lifetime_days
    with uow() as session:
        return tokens.create_token(
            session=session,
            principal=principal,
            token_in=body,
            max_lifetime=timedelta(days=days) if days is not None else None,
        )


@router.get("/tokens", operation_id="listTokens", tags=["tokens"])
def list_tokens(uow: Uow, principal: CurrentPrincipal) -> Page[TokenPublic]:
    with uow() as session:
        return tokens.list_tokens(session=session, principal=principal)


@router.delete("/tokens/{token_id}", operation_id="revokeToken", tags=["tokens"])
def revoke_token(token_id: PathId, uow: Uow, principal: CurrentPrincipal) -> TokenPublic:
    with uow() as session:
        return tokens.revoke_token(session=session, principal=principal, token_id=token_id)


@router.post("/experiments", status_code=201, operation_id="createExperiment", tags=["experiments"])
def create_experiment(
    body: ExperimentCreate, uow: Uow, principal: CurrentPrincipal
) -> ExperimentPublic:
    with uow() as session:
        return projects.create_experiment(session=session, principal=principal, experiment_in=body)


@router.get("/experiments", operation_id="listExperiments", tags=["experiments"])
def list_experiments(
    uow: Uow,
    principal: CurrentPrincipal,
    project: str | None = None,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[ExperimentPublic]:
    with uow() as session:
        return projects.list_experiments(
            session=session, principal=principal, project=project, cursor=cursor, limit=limit
        )


@router.get("/experiments/{experiment_id}", operation_id="getExperiment", tags=["experiments"])
def get_experiment(
    experiment_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> ExperimentPublic:
    with uow() as session:
        return projects.get_experiment(
            session=session, principal=principal, experiment_id=experiment_id
        )


@router.patch("/experiments/{experiment_id}", operation_id="updateExperiment", tags=["experiments"])
def update_experiment(
    experiment_id: PathId, body: ExperimentUpdate, uow: Uow, principal: CurrentPrincipal
) -> ExperimentPublic:
    with uow() as session:
        return projects.update_experiment(
            session=session, principal=principal, experiment_id=experiment_id, experiment_in=body
        )


@router.delete(
    "/experiments/{experiment_id}", operation_id="deleteExperiment", tags=["experiments"]
)
def delete_experiment(
    experiment_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    settings: SettingsDep,
    force: Force = False,
) -> Deleted:
    with uow() as session:
        leftovers = projects.delete_experiment(
            session=session, principal=principal, experiment_id=experiment_id, force=force
        )
    projects.remove_leftovers(
        leftovers, home=settings.home, mlflow_artifact_root=settings.resolved_mlflow_artifact_root
    )
    return Deleted(id=experiment_id)
