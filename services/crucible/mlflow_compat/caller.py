"""Who calls, and which project MLflow's project-less requests (create an experiment, find
one by name) mean: a project token's own project; for a global token the project named by
the basic-auth user name, or Crucible's default project."""

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.db.tables import Project
from crucible.domain.enums import Role
from crucible.mlflow_compat.errors import PERMISSION_DENIED, MlflowError, missing
from crucible.settings import DEFAULT_PROJECT


@dataclass(frozen=True)
class Caller:
    principal: Principal
    project_name: str | None  # from basic auth's user name; None with a bearer token

    def project_id(self, session: Session, role: Role) -> int:
        """The project of project-less requests, checked for `role`."""
        if self.principal.project_id is not None and self.project_name is None:
            project_id = self.principal.project_id
        else:
            name = self.project_name or DEFAULT_PROJECT
            found = session.scalar(select(Project.id).where(Project.name == name))
            if found is None or not self.principal.can_see(found):
                raise missing("project", name)
            project_id = found
        self.require(project_id, role)
        return project_id

    def owns(self, project_id: int | None, role: Role, *, entity: str, key: object) -> None:
        """Refuse a row that is missing (None) or in another project alike, then check `role`."""
        if project_id is None or not self.principal.can_see(project_id):
            raise missing(entity, key)
        self.require(project_id, role)

    def require(self, project_id: int, role: Role) -> None:
        if not self.principal.can_see(project_id):
            raise missing("resource", "in another project")
        if not self.principal.role.allows(role):
            raise MlflowError(
                PERMISSION_DENIED,
                f"this token's role {self.principal.role} cannot do this; it needs {role}",
            )
