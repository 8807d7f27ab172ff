"""Datasets a run reads (resolved, verified, recorded as inputs) and writes (registered as
versions it produced)."""

import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from crucible.artifacts import remote, storage
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


def resolve_input(
    client: CrucibleClient, *, project: str, run_id: int, ref: str, cache_dir: Path
) -> InputDataset:
    """Resolve `name@version` (or `name@latest`), verify its files, record it as an input.

    A dataset on object storage is downloaded first, into `cache_dir/<digest>/`, and the
    local copy is what is verified and read; a copy already there is verified again."""
    version = client.resolve_dataset(project, ref)
    path = storage.local_path(version.uri)
    if path is None:
        path = _local_copy(version, cache_dir)
    if not path.exists():
        raise DatasetCorrupt(f"dataset {version.ref} is missing: nothing at {path}")
    actual = content_of(path)
    if actual.digest != version.digest:
        raise DatasetCorrupt(
            f"dataset {version.ref} at {version.uri} does not match its registered digest: "
            f"expected {version.digest}, found {actual.digest}; it was changed after "
            "registration, so it is not used"
        )
    client.link_input(run_id, RunInputCreate(dataset_version_id=version.id))
    return InputDataset(version=version, path=path)


def _local_copy(version: DatasetVersionPublic, cache_dir: Path) -> Path:
    folder = cache_dir / version.digest.removeprefix("sha256:")
    path = folder / (PurePosixPath(urlparse(version.uri).path).name or "data")
    if path.exists():
        return path
    partial = folder / (storage.TEMP_PREFIX + path.name)
    shutil.rmtree(partial, ignore_errors=True)
    partial.unlink(missing_ok=True)
    try:
        if remote.size(version.uri) is None:  # a listing: the download reads the bytes once
            raise DatasetCorrupt(f"dataset {version.ref} is missing: nothing at {version.uri}")
        remote.download(version.uri, partial)
    except (DatasetCorrupt, remote.StorageUnavailable):
        raise
    except Exception as exc:
        raise remote.StorageUnavailable(
            f"dataset {version.ref} could not be read from {version.uri}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    partial.rename(path)
    return path


def publish(
    client: CrucibleClient,
    *,
    project: str,
    run_id: int,
    name: str,
    path: Path,
    record_count: int | None,
    schema: dict[str, Any] | None,
    outputs_uri: str | None = None,
) -> DatasetVersionPublic:
    """Register the file or directory at `path` as the next version of `name`, made by the run.

    With `outputs_uri` (object storage every pod reaches), the files are copied under it
    first and the copy is what is registered, once its digest matches the local files'.
    The same content again returns the version already registered.
    """
    content = content_of(path)
    uri = storage.file_uri(path)
    if outputs_uri is not None:
        uri = storage.join(outputs_uri, path.name)
        remote.upload(path, uri)
        copied = remote.content(uri)
        if copied is None or copied.digest != content.digest:
            raise DatasetCorrupt(
                f"the copy of {path} at {uri} does not match it ({content.digest}, copy "
                f"{copied.digest if copied else 'missing'}); nothing was registered"
            )
    return client.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": project,
                "name": name,
                "uri": uri,
                "digest": content.digest,
                "record_count": record_count,
                "schema": schema or {},
                "produced_by_run_id": run_id,
            }
        )
    )
