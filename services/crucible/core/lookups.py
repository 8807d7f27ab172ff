"""Fetch-or-404 helpers shared by the use-cases."""

from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.db.tables import Base, Experiment, Project
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


def experiment_by_name(session: Session, project_id: int, name: str) -> Experiment | None:
    return session.scalar(
        select(Experiment).where(Experiment.project_id == project_id, Experiment.name == name)
    )
