"""Artifacts: what is made from checkpoints and datasets (an exported Hugging Face model, a
trained tokenizer), registered with their digest and their sources as lineage edges."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lineage import add_edge
from crucible.core.lookups import get_or_404, project_by_name
from crucible.core.pagination import paginate
from crucible.db.tables import Artifact, Checkpoint, Dataset, DatasetVersion, LineageEdge, Run
from crucible.domain.enums import ArtifactKind, EdgeRelation, NodeType, Role
from crucible.domain.errors import Conflict, NotFound
from crucible.schemas.common import Page
from crucible.schemas.lineage import ArtifactCreate, ArtifactPublic, ArtifactSource


def register_artifact(
    *, session: Session, principal: Principal, artifact_in: ArtifactCreate
) -> ArtifactPublic:
    """Record an artifact with an edge from each of its sources (and from the run that
    wrote it). The same URI with the same digest again returns the one recorded, so a
    retried export adds nothing; other content at a registered URI is a Conflict."""
    project = project_by_name(session, artifact_in.project)
    principal.require(project.id, Role.editor, entity="project", key=artifact_in.project)
    for source in artifact_in.sources:
        _require_in_project(session, source, project.id)
    if artifact_in.produced_by_run_id is not None:
        producer = session.get(Run, artifact_in.produced_by_run_id)
        if producer is None or producer.project_id != project.id:
            raise NotFound("run", artifact_in.produced_by_run_id)

    existing = session.scalar(
        select(Artifact).where(Artifact.project_id == project.id, Artifact.uri == artifact_in.uri)
    )
    if existing is not None:
        if existing.digest != artifact_in.digest:
            raise Conflict(
                f"artifact {existing.id} ({existing.name}) is registered at {existing.uri!r} "
                f"with digest {existing.digest}, not {artifact_in.digest}; artifacts are "
                "immutable, so write this one somewhere else"
            )
        return artifact_public(session, existing)

    artifact = Artifact(
        project_id=project.id,
        kind=artifact_in.kind.value,
        name=artifact_in.name,
        uri=artifact_in.uri,
        digest=artifact_in.digest,
        size_bytes=artifact_in.size_bytes,
        meta=artifact_in.meta,
        produced_by_run_id=artifact_in.produced_by_run_id,
    )
    session.add(artifact)
    session.flush()
    for source in artifact_in.sources:
        add_edge(
            session,
            project_id=project.id,
            source=(source.type, source.id),
            target=(NodeType.artifact, artifact.id),
            relation=EdgeRelation.derived,
        )
    if artifact.produced_by_run_id is not None:
        add_edge(
            session,
            project_id=project.id,
            source=(NodeType.run, artifact.produced_by_run_id),
            target=(NodeType.artifact, artifact.id),
            relation=EdgeRelation.produced,
        )
    return artifact_public(session, artifact)


def _require_in_project(session: Session, source: ArtifactSource, project_id: int) -> None:
    """A source the caller may name: it exists and is in the artifact's project (anything
    else reads as missing, so other projects' ids are not revealed)."""
    if source.type is NodeType.checkpoint:
        owner = session.scalar(
            select(Run.project_id)
            .join(Checkpoint, Checkpoint.run_id == Run.id)
            .where(Checkpoint.id == source.id)
        )
    else:
        owner = session.scalar(
            select(Dataset.project_id)
            .join(DatasetVersion, DatasetVersion.dataset_id == Dataset.id)
            .where(DatasetVersion.id == source.id)
        )
    if owner != project_id:
        raise NotFound(source.type.value.replace("_", " "), source.id)


def get_artifact(*, session: Session, principal: Principal, artifact_id: int) -> ArtifactPublic:
    artifact = get_or_404(session, Artifact, artifact_id, "artifact")
    principal.require(artifact.project_id, Role.viewer, entity="artifact", key=artifact_id)
    return artifact_public(session, artifact)


def list_artifacts(
    *,
    session: Session,
    principal: Principal,
    project: str,
    kind: ArtifactKind | None,
    cursor: str | None,
    limit: int,
    name: str | None = None,
) -> Page[ArtifactPublic]:
    """A project's artifacts, newest first (of one kind with `kind`, of one name with
    `name`)."""
    row = project_by_name(session, project)
    principal.require(row.id, Role.viewer, entity="project", key=project)
    query = select(Artifact).where(Artifact.project_id == row.id)
    if kind is not None:
        query = query.where(Artifact.kind == kind.value)
    if name is not None:
        query = query.where(Artifact.name == name)
    return paginate(
        session,
        query,
        sort=Artifact.id,
        id_column=Artifact.id,
        descending=True,
        cursor=cursor,
        limit=limit,
        to_public=lambda artifact: artifact_public(session, artifact),
    )


def artifact_public(session: Session, artifact: Artifact) -> ArtifactPublic:
    sources = session.execute(
        select(LineageEdge.src_type, LineageEdge.src_id)
        .where(
            LineageEdge.dst_type == NodeType.artifact.value,
            LineageEdge.dst_id == artifact.id,
            LineageEdge.relation == EdgeRelation.derived.value,
        )
        .order_by(LineageEdge.id)
    )
    return ArtifactPublic.model_validate(
        {
            "id": artifact.id,
            "project_id": artifact.project_id,
            "kind": artifact.kind,
            "name": artifact.name,
            "uri": artifact.uri,
            "digest": artifact.digest,
            "size_bytes": artifact.size_bytes,
            "meta": artifact.meta,
            "sources": [{"type": kind, "id": source_id} for kind, source_id in sources],
            "produced_by_run_id": artifact.produced_by_run_id,
            "created_at": artifact.created_at,
        }
    )
