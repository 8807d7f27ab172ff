"""Where checkpoints and datasets live: `file://` paths natively, other schemes via fsspec.

Local writes are atomic: into a temporary directory, fsynced, then renamed to the final
name, so a reader never sees a half-written directory under a final name.
"""

import fcntl
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

TEMP_PREFIX = ".tmp-"


def local_path(uri: str) -> Path | None:
    """The local path of a `file://` URI or a plain path; None for any other scheme."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{uri!r} names host {parsed.netloc!r}; use file:///absolute/path")
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(uri).absolute()
    return None


def file_uri(path: Path) -> str:
    return path.absolute().as_uri()


def join(base_uri: str, name: str) -> str:
    return base_uri.rstrip("/") + "/" + name


def fsync_tree(root: Path) -> None:
    """Flush every file and directory under root (and root itself) to stable storage."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(directory))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_dir(temp: Path, final: Path) -> None:
    """Make a fully written temporary directory visible under its final name, durably."""
    fsync_tree(temp)
    os.rename(temp, final)
    fsync_dir(final.parent)


# -- copies in a download cache that several processes share ----------------------------------


@contextmanager
def cache_entry_lock(folder: Path) -> Iterator[Path]:
    """Hold `folder`'s lock (made if missing) while one process checks for or downloads what
    goes in it: torchrun's local ranks share a pod's cache, and one download is enough."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder


def write_in_place(target: Path, write: Callable[[Path], None]) -> None:
    """Make `target` with `write(partial)` (which downloads and verifies), into a temporary
    sibling of this process's own, renamed to `target` only once `write` returned: a failure
    leaves nothing at `target`, and another process making the same target never sees or
    removes this one's partial copy. A copy another process put there meanwhile (a directory
    cannot be renamed over) holds the same bytes: this one goes."""
    partial = target.with_name(f"{TEMP_PREFIX}{target.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        write(partial)
    except BaseException:
        remove(partial)
        raise
    try:
        partial.rename(target)
    except OSError:
        if not target.exists():
            raise
        remove(partial)


def remove(path: Path) -> None:
    """Delete a file or a folder tree, never following a link inside it, however deep.

    A run's own code can write a tree deeper than `shutil.rmtree` recurses on Python 3.11:
    it raises RecursionError, which `ignore_errors` does not cover, and the tree stays.
    `rm` walks it without recursing in Python."""
    if not path.is_symlink() and path.is_dir():
        try:
            shutil.rmtree(path, ignore_errors=True)
        except RecursionError:
            rm = shutil.which("rm") or "/bin/rm"
            # A fixed program; the path is one argument after `--`, never an option.
            subprocess.run([rm, "-rf", "--", str(path)], check=False, capture_output=True)  # noqa: S603
        return
    path.unlink(missing_ok=True)
