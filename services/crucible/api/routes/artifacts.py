"""Artifacts: exported models and trained tokenizers, with their sources in lineage."""

from typing import Annotated

from fastapi import APIRouter, Query

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import Limit, PathId
from crucible.core import artifacts
from crucible.core.storage_check import layout_of, require_project_uri
from crucible.domain.enums import ArtifactKind
from crucible.domain.storage_uris import require_usable_uri
from crucible.schemas.common import Page
from crucible.schemas.lineage import ArtifactCreate, ArtifactPublic

router = APIRouter(prefix="/api/v1")


@router.post("/artifacts", status_code=201, operation_id="registerArtifact", tags=["artifacts"])
def register_artifact(
    body: ArtifactCreate, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> ArtifactPublic:
    """Register an artifact made from checkpoints or dataset versions of the project. The
    same URI and digest again returns it; the same URI with another digest is a 409. Its URI
    must lie in the project's storage or in shared storage under a root (file:// or s3://)."""
    require_usable_uri(body.uri)
    with uow() as session:
        artifact = artifacts.register_artifact(
            session=session, principal=principal, artifact_in=body
        )
        # After the access check, before the commit: a refusal registers nothing.
        require_project_uri(
            session,
            layout_of(settings),
            project_id=artifact.project_id,
            uri=body.uri,
            shared_ok=True,
        )
        return artifact


@router.get("/artifacts/{artifact_id}", operation_id="getArtifact", tags=["artifacts"])
def get_artifact(artifact_id: PathId, uow: Uow, principal: CurrentPrincipal) -> ArtifactPublic:
    with uow() as session:
        return artifacts.get_artifact(session=session, principal=principal, artifact_id=artifact_id)


@router.get("/artifacts", operation_id="listArtifacts", tags=["artifacts"])
def list_artifacts(
    project: str,
    uow: Uow,
    principal: CurrentPrincipal,
    kind: ArtifactKind | None = None,
    name: Annotated[str | None, Query(max_length=128)] = None,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[ArtifactPublic]:
    """A project's artifacts, newest first; `kind` and `name` narrow them."""
    with uow() as session:
        return artifacts.list_artifacts(
            session=session,
            principal=principal,
            project=project,
            kind=kind,
            name=name,
            cursor=cursor,
            limit=limit,
        )
