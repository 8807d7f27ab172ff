"""Datasets and their numbered, content-addressed versions."""

import re

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.events import record_event
from crucible.core.lineage import add_edge
from crucible.core.lookups import get_or_404, project_by_name
from crucible.core.pagination import paginate
from crucible.db.tables import Dataset, DatasetVersion, Run
from crucible.db.upsert import insert_ignoring_duplicates
from crucible.domain import reasons
from crucible.domain.enums import EdgeRelation, NodeType, Role
from crucible.domain.errors import Conflict, InvalidInput, NotFound
from crucible.domain.specs import DATASET_REF
from crucible.schemas.common import Page
from crucible.schemas.lineage import DatasetPublic, DatasetVersionCreate, DatasetVersionPublic

_REF = re.compile(DATASET_REF)


def register_version(
    *, session: Session, principal: Principal, version_in: DatasetVersionCreate
) -> DatasetVersionPublic:
    """Add the next version of a dataset (creating the dataset on first use).

    Registering the same content again (same dataset, same digest) returns the version that
    already holds it, so a retried upload never makes a second version.
    """
    project = project_by_name(session, version_in.project)
    principal.require(project.id, Role.editor, entity="project", key=version_in.project)
    producer = None
    if version_in.produced_by_run_id is not None:
        producer = session.get(Run, version_in.produced_by_run_id)
        if producer is None or producer.project_id != project.id:
            raise NotFound("run", version_in.produced_by_run_id)

    dataset = _locked_dataset(session, project.id, version_in.name)
    existing = session.scalar(
        select(DatasetVersion).where(
            DatasetVersion.dataset_id == dataset.id, DatasetVersion.digest == version_in.digest
        )
    )
    if existing is not None:
        if existing.uri != version_in.uri:
            # The same bytes somewhere else: answering with the old version would tell the
            # caller its URI is registered when it is not.
            raise Conflict(
                f"dataset {version_in.name!r} version {existing.version} already holds this "
                f"content ({version_in.digest}) at {existing.uri!r}, not at {version_in.uri!r}; "
                f"read it as {version_in.name}@{existing.version}, or register other content"
            )
        return version_public(existing, dataset)

    latest = session.scalar(
        select(func.max(DatasetVersion.version)).where(DatasetVersion.dataset_id == dataset.id)
    )
    version = DatasetVersion(
        dataset_id=dataset.id,
        version=(latest or 0) + 1,
        uri=version_in.uri,
        digest=version_in.digest,
        record_count=version_in.record_count,
        schema=version_in.schema_,
        produced_by_run_id=version_in.produced_by_run_id,
    )
    session.add(version)
    session.flush()
    if producer is not None:
        add_edge(
            session,
            project_id=project.id,
            source=(NodeType.run, producer.id),
            target=(NodeType.dataset_version, version.id),
            relation=EdgeRelation.produced,
        )
        record_event(
            session,
            run_id=producer.id,
            type=reasons.EVENT_DATASET_VERSION_REGISTERED,
            message=f"produced dataset {dataset.name}@{version.version}",
            data={"dataset_version_id": version.id, "digest": version.digest},
        )
    return version_public(version, dataset)


def _locked_dataset(session: Session, project_id: int, name: str) -> Dataset:
    """The dataset row, created if new and locked (FOR UPDATE on Postgres) until commit.

    The lock serialises concurrent registrations of one dataset, so version numbers stay
    1, 2, 3, ... and the digest check above cannot miss a version committed meanwhile.
    SQLite has no row locks, but it runs one writer at a time anyway.
    """
    query = (
        select(Dataset)
        .where(Dataset.project_id == project_id, Dataset.name == name)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    dataset = session.scalar(query)
    if dataset is None:
        insert_ignoring_duplicates(session, Dataset, project_id=project_id, name=name)
        dataset = session.scalar(query)
    assert dataset is not None  # inserted above, or by a concurrent request
    return dataset


def version_public(version: DatasetVersion, dataset: Dataset) -> DatasetVersionPublic:
    return DatasetVersionPublic.model_validate(
        {
            "id": version.id,
            "dataset_id": dataset.id,
            "project_id": dataset.project_id,
            "name": dataset.name,
            "version": version.version,
            "ref": f"{dataset.name}@{version.version}",
            "uri": version.uri,
            "digest": version.digest,
            "record_count": version.record_count,
            "schema": version.schema,
            "produced_by_run_id": version.produced_by_run_id,
            "created_at": version.created_at,
        }
    )


def list_datasets(
    *, session: Session, principal: Principal, project: str, cursor: str | None, limit: int
) -> Page[DatasetPublic]:
    row = project_by_name(session, project)
    principal.require(row.id, Role.viewer, entity="project", key=project)
    page = paginate(
        session,
        select(Dataset).where(Dataset.project_id == row.id),
        sort=Dataset.name,
        id_column=Dataset.id,
        descending=False,
        cursor=cursor,
        limit=limit,
        to_public=lambda dataset: dataset,
    )
    latest: dict[int, int] = {
        dataset_id: version
        for dataset_id, version in session.execute(
            select(DatasetVersion.dataset_id, func.max(DatasetVersion.version))
            .where(DatasetVersion.dataset_id.in_([d.id for d in page.items]))
            .group_by(DatasetVersion.dataset_id)
        )
    }
    items = [
        DatasetPublic(
            id=d.id,
            project_id=d.project_id,
            name=d.name,
            description=d.description,
            latest_version=latest.get(d.id),
            created_at=d.created_at,
        )
        for d in page.items
    ]
    return Page(items=items, next_cursor=page.next_cursor)


def list_versions(
    *,
    session: Session,
    principal: Principal,
    dataset_id: int,
    descending: bool = True,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[DatasetVersionPublic]:
    dataset = get_or_404(session, Dataset, dataset_id, "dataset")
    principal.require(dataset.project_id, Role.viewer, entity="dataset", key=dataset_id)
    return paginate(
        session,
        select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id),
        sort=DatasetVersion.version,
        id_column=DatasetVersion.id,
        descending=descending,
        cursor=cursor,
        limit=limit,
        to_public=lambda v: version_public(v, dataset),
    )


def get_version(*, session: Session, principal: Principal, version_id: int) -> DatasetVersionPublic:
    version = get_or_404(session, DatasetVersion, version_id, "dataset version")
    dataset = session.get_one(Dataset, version.dataset_id)
    principal.require(dataset.project_id, Role.viewer, entity="dataset version", key=version_id)
    return version_public(version, dataset)


def resolve(
    *, session: Session, principal: Principal, project: str, ref: str
) -> DatasetVersionPublic:
    """`name@<version>` or `name@latest` -> that version of the project's dataset."""
    if _REF.fullmatch(ref) is None:
        raise InvalidInput(
            "ref",
            ref,
            "write a dataset reference as name@<version> or name@latest, e.g. prompts@3",
            location="query",
        )
    row = project_by_name(session, project)
    principal.require(row.id, Role.viewer, entity="project", key=project)
    dataset, version = version_by_ref(session, row.id, ref)
    if dataset is None:
        raise NotFound("dataset", ref.rpartition("@")[0])
    if version is None:
        raise NotFound("dataset version", ref)
    return version_public(version, dataset)


def version_by_ref(
    session: Session, project_id: int, ref: str
) -> tuple[Dataset | None, DatasetVersion | None]:
    """A well-formed `name@<version>` or `name@latest` -> the project's dataset of that name
    (None: there is none) and that version of it (None: not there, or no version yet)."""
    name, _, wanted = ref.rpartition("@")
    dataset = session.scalar(
        select(Dataset).where(Dataset.project_id == project_id, Dataset.name == name)
    )
    if dataset is None:
        return None, None
    query = select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
    if wanted == "latest":
        query = query.order_by(DatasetVersion.version.desc()).limit(1)
    else:
        query = query.where(DatasetVersion.version == int(wanted))
    return dataset, session.scalar(query)
