"""Projects and experiments."""

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from crucible.artifacts import remote, storage
from crucible.core.access import Principal
from crucible.core.lookups import (
    experiment_by_name,
    get_or_404,
    listed_project_id,
    project_by_name,
)
from crucible.core.pagination import paginate
from crucible.db.tables import Experiment, Project, Run
from crucible.domain.enums import Role
from crucible.domain.errors import Conflict
from crucible.schemas.common import Page
from crucible.schemas.tenancy import (
    ExperimentCreate,
    ExperimentPublic,
    ExperimentUpdate,
    ProjectCreate,
    ProjectPublic,
    ProjectUpdate,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Leftovers:
    """What a deleted project or experiment leaves outside the database, to remove once the
    deletion has committed: its runs' folders under the home (`runs/<id>/`: logs, outputs,
    local checkpoints) and its experiments' MLflow artifact folders (`<root>/<id>/`)."""

    run_ids: list[int]
    experiment_ids: list[int]


def remove_leftovers(leftovers: Leftovers, *, home: Path, mlflow_artifact_root: str) -> None:
    """Remove them; a store that does not answer keeps its files, which no row names any
    more (and, ids never being reused, none will)."""
    for run_id in leftovers.run_ids:
        storage.remove(home / "runs" / str(run_id))
    for experiment_id in leftovers.experiment_ids:
        uri = f"{mlflow_artifact_root.rstrip('/')}/{experiment_id}"
        path = storage.local_path(uri)
        try:
            if path is not None:
                storage.remove(path)
            else:
                remote.remove(uri)
        except Exception:  # botocore and aiohttp raise many kinds; all mean "not now"
            log.warning(
                "could not delete the artifacts of deleted experiment %s", uri, exc_info=True
            )


def create_project(
    *, session: Session, principal: Principal, project_in: ProjectCreate
) -> ProjectPublic:
    principal.require_global_admin()
    namespace = project_in.namespace or project_in.name
    clash = session.scalar(
        select(Project).where((Project.name == project_in.name) | (Project.namespace == namespace))
    )
    if clash is not None:
        raise Conflict(f"a project named {clash.name!r} (namespace {clash.namespace!r}) exists")
    row = Project(name=project_in.name, description=project_in.description, namespace=namespace)
    session.add(row)
    session.flush()
    return ProjectPublic.model_validate(row)


def list_projects(
    *, session: Session, principal: Principal, cursor: str | None, limit: int
) -> Page[ProjectPublic]:
    query = select(Project)
    if principal.project_id is not None:
        query = query.where(Project.id == principal.project_id)
    return paginate(
        session,
        query,
        sort=Project.name,
        id_column=Project.id,
        descending=False,
        cursor=cursor,
        limit=limit,
        to_public=ProjectPublic.model_validate,
    )


def get_project(*, session: Session, principal: Principal, project_id: int) -> ProjectPublic:
    row = get_or_404(session, Project, project_id, "project")
    principal.require(row.id, Role.viewer, entity="project", key=project_id)
    return ProjectPublic.model_validate(row)


def update_project(
    *, session: Session, principal: Principal, project_id: int, project_in: ProjectUpdate
) -> ProjectPublic:
    row = get_or_404(session, Project, project_id, "project")
    principal.require(row.id, Role.admin, entity="project", key=project_id)
    for field, value in project_in.model_dump(exclude_unset=True).items():
        setattr(row, field, value)
    session.flush()
    return ProjectPublic.model_validate(row)


def delete_project(
    *, session: Session, principal: Principal, project_id: int, force: bool
) -> Leftovers:
    """Delete the project and (with `force`) its runs; what they leave on disk is the
    caller's to remove after the commit (`remove_leftovers`)."""
    row = get_or_404(session, Project, project_id, "project")
    principal.require(row.id, Role.admin, entity="project", key=project_id)
    principal.require_global_admin()
    _refuse_if_runs(session, Run.project_id == row.id, f"project {row.name!r}", force)
    leftovers = Leftovers(
        run_ids=list(session.scalars(select(Run.id).where(Run.project_id == row.id))),
        experiment_ids=list(
            session.scalars(select(Experiment.id).where(Experiment.project_id == row.id))
        ),
    )
    session.delete(row)
    session.flush()
    return leftovers


def create_experiment(
    *, session: Session, principal: Principal, experiment_in: ExperimentCreate
) -> ExperimentPublic:
    project = project_by_name(session, experiment_in.project)
    principal.require(project.id, Role.editor, entity="project", key=experiment_in.project)
    if experiment_by_name(session, project.id, experiment_in.name) is not None:
        raise Conflict(
            f"experiment {experiment_in.name!r} already exists in project {project.name!r}"
        )
    row = Experiment(
        project_id=project.id,
        name=experiment_in.name,
        description=experiment_in.description,
        tags=experiment_in.tags,
    )
    session.add(row)
    session.flush()
    return ExperimentPublic.model_validate(row)


def list_experiments(
    *,
    session: Session,
    principal: Principal,
    project: str | None,
    cursor: str | None,
    limit: int,
) -> Page[ExperimentPublic]:
    query = select(Experiment)
    if (project_id := listed_project_id(session, principal, project)) is not None:
        query = query.where(Experiment.project_id == project_id)
    return paginate(
        session,
        query,
        sort=Experiment.created_at,
        id_column=Experiment.id,
        descending=True,
        cursor=cursor,
        limit=limit,
        to_public=ExperimentPublic.model_validate,
    )


def get_experiment(
    *, session: Session, principal: Principal, experiment_id: int
) -> ExperimentPublic:
    row = get_or_404(session, Experiment, experiment_id, "experiment")
    principal.require(row.project_id, Role.viewer, entity="experiment", key=experiment_id)
    return ExperimentPublic.model_validate(row)


def update_experiment(
    *,
    session: Session,
    principal: Principal,
    experiment_id: int,
    experiment_in: ExperimentUpdate,
) -> ExperimentPublic:
    row = get_or_404(session, Experiment, experiment_id, "experiment")
    principal.require(row.project_id, Role.editor, entity="experiment", key=experiment_id)
    for field, value in experiment_in.model_dump(exclude_unset=True).items():
        setattr(row, field, value)
    session.flush()
    return ExperimentPublic.model_validate(row)


def delete_experiment(
    *, session: Session, principal: Principal, experiment_id: int, force: bool
) -> Leftovers:
    """As `delete_project`, for one experiment."""
    row = get_or_404(session, Experiment, experiment_id, "experiment")
    principal.require(row.project_id, Role.editor, entity="experiment", key=experiment_id)
    _refuse_if_runs(session, Run.experiment_id == row.id, f"experiment {row.name!r}", force)
    leftovers = Leftovers(
        run_ids=list(session.scalars(select(Run.id).where(Run.experiment_id == row.id))),
        experiment_ids=[row.id],
    )
    session.delete(row)
    session.flush()
    return leftovers


def _refuse_if_runs(
    session: Session, condition: ColumnElement[bool], what: str, force: bool
) -> None:
    count = session.scalar(select(func.count()).select_from(Run).where(condition))
    if count and not force:
        raise Conflict(f"{what} has {count} runs; pass force=true to delete them too")
