from datetime import datetime

from pydantic import Field

from crucible.domain.enums import Role
from crucible.schemas.common import (
    PLAIN_NAME,
    ApiModel,
    Description,
    Moment,
    Name,
    PublicModel,
    Tags,
    UpdateModel,
)


class ProjectCreate(ApiModel):
    name: Name
    description: Description = ""
    namespace: Name | None = Field(
        default=None, description="Kubernetes namespace for its runs; default: the name."
    )


class ProjectUpdate(UpdateModel):
    description: Description | None = None


class ProjectPublic(PublicModel):
    id: int
    name: str
    description: str
    namespace: str
    created_at: datetime


class TokenCreate(ApiModel):
    name: str = Field(min_length=1, max_length=200, pattern=PLAIN_NAME)
    project: str | None = Field(
        default=None, description="Project name; omit for a global token (admins only)."
    )
    role: Role = Role.viewer
    expires_at: Moment | None = Field(
        default=None, description="When it stops working; in the future, with a time zone."
    )


class TokenPublic(PublicModel):
    id: int
    name: str
    project_id: int | None
    role: Role
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="The secret. Shown once; only its hash is stored.")


class ExperimentCreate(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    name: Name
    description: Description = ""
    tags: Tags = Field(default_factory=dict)


class ExperimentUpdate(UpdateModel):
    description: Description | None = None
    tags: Tags | None = None


class ExperimentPublic(PublicModel):
    id: int
    project_id: int
    name: str
    description: str
    tags: dict[str, str]
    created_at: datetime
    updated_at: datetime
