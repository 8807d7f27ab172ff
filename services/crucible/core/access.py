"""Who is calling, and what they may touch."""

from dataclasses import dataclass

from crucible.domain.enums import Role
from crucible.domain.errors import Forbidden, NotFound


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. `project_id` None means every project (global token)."""

    token_id: int | None
    role: Role
    project_id: int | None

    @property
    def is_global_admin(self) -> bool:
        return self.project_id is None and self.role is Role.admin

    def can_see(self, project_id: int) -> bool:
        return self.project_id is None or self.project_id == project_id

    def require(self, project_id: int, role: Role, *, entity: str, key: object) -> None:
        """Refuse unless this caller holds `role` in `project_id`.

        Another project's entity answers 404, the same as a missing one, so ids do not
        reveal what exists elsewhere; the right project with too weak a role answers 403.
        """
        if not self.can_see(project_id):
            raise NotFound(entity, key)
        if not self.role.allows(role):
            raise Forbidden(f"this token's role {self.role} cannot do this; it needs {role}")

    def require_global_admin(self) -> None:
        if not self.is_global_admin:
            raise Forbidden("only a global admin token can do this")


SYSTEM = Principal(token_id=None, role=Role.admin, project_id=None)
