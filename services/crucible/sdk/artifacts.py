"""Artifacts a run writes (a trained tokenizer, an exported model), registered with their
digest, the run that made them and what they were made from; and artifacts a run reads,
verified and recorded as its inputs."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from crucible.artifacts import remote, storage
from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.schemas.lineage import ArtifactCreate, ArtifactPublic, RunInputCreate


class ArtifactCopyMismatch(Exception):
    """The copy of an artifact on object storage does not match the files it was made from."""


def publish(
    client: CrucibleClient,
    *,
    project: str,
    run_id: int | None,
    kind: str,
    name: str,
    path: Path,
    sources: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    outputs_uri: str | None = None,
) -> ArtifactPublic:
    """Register the file or directory at `path` as artifact `name` of `kind`, made from
    `sources` (`{"type": "dataset_version" | "checkpoint", "id": ...}`) by `run_id`.

    With `outputs_uri` (object storage every pod reaches) the files are copied under it
    first and the copy is what is registered, once its digest matches the local files'.
    """
    content = content_of(path)
    uri = storage.file_uri(path)
    if outputs_uri is not None:
        uri = storage.join(outputs_uri, path.name)
        remote.upload(path, uri)
        copied = remote.content(uri)
        if copied is None or copied.digest != content.digest:
            raise ArtifactCopyMismatch(
                f"the copy of {path} at {uri} does not match it ({content.digest}, copy "
                f"{copied.digest if copied else 'missing'}); nothing was registered"
            )
    return client.register_artifact(
        ArtifactCreate.model_validate(
            {
                "project": project,
                "kind": kind,
                "name": name,
                "uri": uri,
                "digest": content.digest,
                "size_bytes": content.size_bytes,
                "meta": dict(meta),
                "sources": [dict(source) for source in sources],
                "produced_by_run_id": run_id,
            }
        )
    )


class ArtifactNotFound(Exception):
    """No artifact of the project has the name asked for."""


class ArtifactCorrupt(Exception):
    """An artifact's files are missing or do not match its registered digest."""


@dataclass(frozen=True)
class InputArtifact:
    artifact: ArtifactPublic
    path: Path
    """Where the verified files are on this machine."""


def resolve_input(
    client: CrucibleClient, *, project: str, run_id: int, ref: str, cache_dir: Path
) -> InputArtifact:
    """`fetch` the artifact `ref` names and record it as an input of the run."""
    fetched = fetch(client, project=project, ref=ref, cache_dir=cache_dir)
    client.link_input(run_id, RunInputCreate(artifact_id=fetched.artifact.id))
    return fetched


def fetch(client: CrucibleClient, *, project: str, ref: str, cache_dir: Path) -> InputArtifact:
    """The artifact `ref` names (its id, or its name: the newest of that name) as verified
    local files. One on object storage is downloaded first, into `cache_dir/<digest>/`."""
    artifact = find(client, project, ref)
    path = storage.local_path(artifact.uri)
    if path is not None:
        _verify(artifact, path)
        return InputArtifact(artifact, path)
    # The processes of one pod share the cache: one downloads, the others wait and verify.
    with storage.cache_entry_lock(cache_dir / artifact.digest.removeprefix("sha256:")) as folder:
        path = folder / _stored_name(artifact.uri)
        if path.exists():
            _verify(artifact, path)  # a cached copy: checked again
        else:
            _download_verified(artifact, path)
    return InputArtifact(artifact, path)


def find(client: CrucibleClient, project: str, ref: str) -> ArtifactPublic:
    """The artifact of id `ref`, or the newest named `ref`."""
    if ref.isascii() and ref.isdigit():
        return client.get_artifact(int(ref))
    named = client.list_artifacts(project, name=ref).items
    if not named:
        raise ArtifactNotFound(f"project {project} has no artifact named {ref!r}")
    return named[0]


def _stored_name(uri: str) -> str:
    return PurePosixPath(urlparse(uri).path).name or "artifact"


def _verify(artifact: ArtifactPublic, path: Path) -> None:
    actual = content_of(path) if path.exists() else None
    if actual is None or actual.digest != artifact.digest:
        found = actual.digest if actual else "nothing"
        raise ArtifactCorrupt(
            f"artifact {artifact.id} ({artifact.name}) at {artifact.uri} does not match its "
            f"registered digest: expected {artifact.digest}, found {found}; it is not used"
        )


def _download_verified(artifact: ArtifactPublic, path: Path) -> None:
    """Download beside `path` and rename it into place only once it matches the digest, so
    the cache never keeps a partial or changed copy."""

    def fetch_into(partial: Path) -> None:
        if remote.size(artifact.uri) is None:
            raise ArtifactCorrupt(f"artifact {artifact.id} is missing: nothing at {artifact.uri}")
        remote.download(artifact.uri, partial)
        _verify(artifact, partial)

    storage.write_in_place(path, fetch_into)


def copy_verified(artifact: ArtifactPublic, target: Path) -> None:
    """Copy the artifact's file or directory (`file://` or object storage) to `target`, which
    must not exist, checked against its registered digest. The copy is written beside
    `target` and renamed into place only once it matches, so a failure (files missing or
    changed, storage unreachable) leaves nothing at `target`."""
    try:
        _download_verified(artifact, target)
    except (ArtifactCorrupt, remote.StorageUnavailable):
        raise
    except Exception as exc:  # fsspec and botocore raise many kinds; all mean "not read"
        raise remote.StorageUnavailable(
            f"artifact {artifact.id} ({artifact.name}) could not be read from {artifact.uri}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
