"""Fetch-or-404 helpers shared by the use-cases."""

from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.db.tables import Base, Experiment, Project
from crucible.domain.enums import Role
from crucible.domain.errors import NotFound

RowT = TypeVar("RowT", bound=Base)


def get_or_404(session: Session, table: type[RowT], row_id: int, entity: str) -> RowT:
    row = session.get(table, row_id)
    if row is None:
        raise NotFound(entity, row_id)
    return row


def project_by_name(session: Session, name: str) -> Project:
    row = session.scalar(select(Project).where(Project.name == name))
    if row is None:
        raise NotFound("project", name)
    return row


def listed_project_id(session: Session, principal: Principal, project: str | None) -> int | None:
    """The project a list is limited to: the one named, if the caller may see it, else the
    token's own; None for a global token that names none (every project)."""
    if project is None:
        return principal.project_id
    row = project_by_name(session, project)
    principal.require(row.id, Role.viewer, entity="project", key=project)
    return row.id


def experiment_by_name(session: Session, project_id: int, name: str) -> Experiment | None:
    return session.scalar(
        select(Experiment).where(Experiment.project_id == project_id, Experiment.name == name)
    )
