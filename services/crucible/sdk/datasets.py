"""Datasets a run reads (resolved, verified, recorded as inputs) and writes (registered as
versions it produced)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.artifacts import storage
from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.schemas.lineage import DatasetVersionCreate, DatasetVersionPublic, RunInputCreate


class DatasetCorrupt(Exception):
    """A dataset's files do not match the digest of the version that names them."""


@dataclass(frozen=True)
class InputDataset:
    version: DatasetVersionPublic
    path: Path
    """Where the verified files are on this machine."""


def resolve_input(client: CrucibleClient, *, project: str, run_id: int, ref: str) -> InputDataset:
    """Resolve `name@version` (or `name@latest`), verify its files, record it as an input."""
    version = client.resolve_dataset(project, ref)
    path = storage.local_path(version.uri)
    if path is None:
        raise ValueError(
            f"dataset {version.ref} lives at {version.uri}; only file:// datasets can be read "
            "as local files"
        )
    if not path.exists():
        raise DatasetCorrupt(f"dataset {version.ref} is missing: nothing at {path}")
    actual = content_of(path)
    if actual.digest != version.digest:
        raise DatasetCorrupt(
            f"dataset {version.ref} at {path} does not match its registered digest: expected "
            f"{version.digest}, found {actual.digest}; it was changed after registration, so "
            "it is not used"
        )
    client.link_input(run_id, RunInputCreate(dataset_version_id=version.id))
    return InputDataset(version=version, path=path)


def publish(
    client: CrucibleClient,
    *,
    project: str,
    run_id: int,
    name: str,
    path: Path,
    record_count: int | None,
    schema: dict[str, Any] | None,
) -> DatasetVersionPublic:
    """Register the file or directory at `path` as the next version of `name`, made by the run.

    The same content again returns the version already registered.
    """
    content = content_of(path)
    return client.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": project,
                "name": name,
                "uri": storage.file_uri(path),
                "digest": content.digest,
                "record_count": record_count,
                "schema": schema or {},
                "produced_by_run_id": run_id,
            }
        )
    )
