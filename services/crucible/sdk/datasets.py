"""Datasets a run reads (resolved, verified, recorded as inputs) and writes (registered as
versions it produced). `crucible datasets` copies and registers through the same functions,
with no run."""

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
    """`fetch` the dataset `ref` names and record it as an input of the run."""
    fetched = fetch(client, project=project, ref=ref, cache_dir=cache_dir)
    client.link_input(run_id, RunInputCreate(dataset_version_id=fetched.version.id))
    return fetched


def fetch(client: CrucibleClient, *, project: str, ref: str, cache_dir: Path) -> InputDataset:
    """Resolve `name@version` (or `name@latest`) to verified local files.

    A dataset on object storage is downloaded first, into `cache_dir/<digest>/`, and the
    local copy is what is verified and read; a copy already there is verified again."""
    version = client.resolve_dataset(project, ref)
    path = storage.local_path(version.uri)
    if path is None:
        path = _cached_copy(version, cache_dir)
    else:
        verify(version, path)
    return InputDataset(version=version, path=path)


def verify(version: DatasetVersionPublic, path: Path) -> None:
    """Raise DatasetCorrupt unless the files at `path` are the version's, by digest."""
    if not path.exists():
        raise DatasetCorrupt(f"dataset {version.ref} is missing: nothing at {path}")
    actual = content_of(path)
    if actual.digest != version.digest:
        raise DatasetCorrupt(
            f"dataset {version.ref} at {version.uri} does not match its registered digest: "
            f"expected {version.digest}, found {actual.digest}; it was changed after "
            "registration, so it is not used"
        )


def stored_name(version: DatasetVersionPublic) -> str:
    """The name of the version's file or directory: the last part of its URI."""
    path = storage.local_path(version.uri)
    if path is not None:
        return path.name or "data"
    return PurePosixPath(urlparse(version.uri).path).name or "data"


def copy_verified(version: DatasetVersionPublic, target: Path) -> None:
    """Copy the version's file or directory (`file://` or object storage) to `target`, which
    must not exist, and check the copy against the version's digest; a failure (files
    missing or changed, storage unreachable) leaves nothing at `target`
    (storage.write_in_place)."""

    def fetch_into(partial: Path) -> None:
        _download(version, partial)
        verify(version, partial)

    storage.write_in_place(target, fetch_into)


def _cached_copy(version: DatasetVersionPublic, cache_dir: Path) -> Path:
    with storage.cache_entry_lock(cache_dir / version.digest.removeprefix("sha256:")) as folder:
        path = folder / stored_name(version)
        if path.exists():
            verify(version, path)
        else:
            copy_verified(version, path)
    return path


def _download(version: DatasetVersionPublic, local: Path) -> None:
    try:
        if remote.size(version.uri) is None:  # a listing: the download reads the bytes once
            raise DatasetCorrupt(f"dataset {version.ref} is missing: nothing at {version.uri}")
        remote.download(version.uri, local)
    except (DatasetCorrupt, remote.StorageUnavailable):
        raise
    except Exception as exc:
        raise remote.StorageUnavailable(
            f"dataset {version.ref} could not be read from {version.uri}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def publish(
    client: CrucibleClient,
    *,
    project: str,
    run_id: int | None,
    name: str,
    path: Path,
    record_count: int | None,
    schema: dict[str, Any] | None,
    outputs_uri: str | None = None,
) -> DatasetVersionPublic:
    """Register the file or directory at `path` as the next version of `name`, made by the run
    `run_id` (None: by no run, e.g. registered from the CLI).

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
