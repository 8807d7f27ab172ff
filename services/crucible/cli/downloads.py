"""Stored files copied into a directory the user names, whole or not at all: the copy goes to
a staging directory beside it and is renamed into place only once it matched its digest."""

import shutil
from collections.abc import Callable
from pathlib import Path

from crucible.domain.errors import CrucibleError


def download_into(
    directory: Path,
    stored_name: str,
    copy_verified: Callable[[Path], None],
    corrupt: type[Exception],
) -> None:
    """Copy with `copy_verified(destination)` (which raises `corrupt` on a digest mismatch)
    under `stored_name`, then move it to `directory`: a folder's files straight in it, a
    single file under its name. On failure nothing is left at `directory`."""
    from crucible.artifacts import remote, storage

    staging = directory.with_name(storage.TEMP_PREFIX + directory.name)
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted download left
    staging.mkdir(parents=True)
    try:
        copied = staging / stored_name
        copy_verified(copied)
        storage.commit_dir(copied if copied.is_dir() else staging, directory)
    except (corrupt, remote.StorageUnavailable) as exc:
        raise CrucibleError(f"{exc}; nothing was written to {directory}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
