"""`crucible submit --package`: a directory (or an archive packed before) made a code package
and registered as a `code` artifact, stored under the content's digest so the same files are
the same artifact wherever and however often they are submitted."""

import re
import tempfile
from pathlib import Path

from crucible.artifacts import code_package, remote, storage
from crucible.artifacts.code_package import PackageError, Packed
from crucible.client import CrucibleClient
from crucible.domain.enums import ArtifactKind
from crucible.domain.errors import CrucibleError
from crucible.schemas.lineage import DATASET_NAME_PATTERN, ArtifactCreate, ArtifactPublic


def load(path: Path) -> Packed:
    """The package of `path`: a directory packed, or an archive file checked as it is."""
    if path.is_dir():
        return code_package.pack(path)
    if not path.exists():
        raise PackageError(f"{path} does not exist")
    data = path.read_bytes()
    files = code_package.check(data, what=str(path))
    if files == 0:
        raise PackageError(f"{path} holds no files")
    return Packed(data, code_package.digest_of(data), files)


def package_name(path: Path) -> str:
    """An artifact name from the directory's (or archive's) name."""
    stem = path.resolve().name.removesuffix(code_package.ARCHIVE_SUFFIX)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).lstrip("._-")[:128]
    return name if re.fullmatch(DATASET_NAME_PATTERN, name) else "code"


def register(
    api: CrucibleClient, packed: Packed, *, project: str, name: str, to: str | None, home: Path
) -> ArtifactPublic:
    """Store the archive under `to` (read back and checked), else in `home`/packages, and
    register it. What is at its name is replaced when it is not these bytes (a changed
    copy), so the artifact's URI always holds its digest's bytes."""
    if to is None:
        target = home / "packages" / packed.file_name
        if not target.is_file() or code_package.digest_of(target.read_bytes()) != packed.digest:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(storage.TEMP_PREFIX + target.name)
            partial.write_bytes(packed.data)
            partial.replace(target)
        uri = storage.file_uri(target)
    else:
        uri = storage.join(to, packed.file_name)
        with tempfile.TemporaryDirectory(prefix="crucible-package-") as scratch:
            staged = Path(scratch) / packed.file_name
            staged.write_bytes(packed.data)
            try:
                remote.upload(staged, uri)
                copied = remote.content(uri)
            except remote.StorageUnavailable as exc:
                raise CrucibleError(str(exc)) from None
        if copied is None or copied.digest != packed.digest:
            raise CrucibleError(
                f"the copy of the package at {uri} does not match it ({packed.digest}, copy "
                f"{copied.digest if copied else 'missing'}); nothing was registered"
            )
    return api.register_artifact(
        ArtifactCreate(
            project=project,
            kind=ArtifactKind.code,
            name=name,
            uri=uri,
            digest=packed.digest,
            size_bytes=len(packed.data),
            meta={"files": packed.files},
        )
    )
