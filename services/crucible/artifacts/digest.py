"""Content digests of checkpoints and datasets: one function, so both sides always agree.

A directory's digest covers its relative file names and their bytes, so a missing, renamed,
truncated or altered file changes it. A single file's digest is the sha256 of its bytes.
"""

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Content:
    digest: str
    """`sha256:<hex>`, as the control plane stores it."""
    size_bytes: int
    """Total bytes of every file."""


def content_of(path: Path) -> Content:
    """The digest and size of a file, or of every file under a directory."""
    if path.is_file():
        hasher = hashlib.sha256()
        with path.open("rb") as handle:
            size = _feed(hasher, handle)
        return Content(f"sha256:{hasher.hexdigest()}", size)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is neither a file nor a directory")
    files = [
        (p.relative_to(path).as_posix(), p.stat().st_size, p.open)
        for p in path.rglob("*")
        if p.is_file()
    ]
    return _content_of_files(files)


def content_of_remote(fs: Any, root: str) -> Content:
    """`content_of` for a file or directory on an fsspec filesystem (s3://, memory://...)."""
    root = root.rstrip("/")
    if fs.isfile(root):
        hasher = hashlib.sha256()
        with fs.open(root, "rb") as handle:
            size = _feed(hasher, handle)
        return Content(f"sha256:{hasher.hexdigest()}", size)
    files = []
    for name, info in fs.find(root, detail=True).items():
        relative = name[len(fs._strip_protocol(root)) :].lstrip("/")
        files.append((relative, int(info["size"]), lambda mode, n=name: fs.open(n, mode)))
    return _content_of_files(files)


def _content_of_files(files: Iterable[tuple[str, int, Callable[[str], IO[bytes]]]]) -> Content:
    hasher = hashlib.sha256()
    total = 0
    for name, size, opener in sorted(files, key=lambda f: f[0]):
        # Name and length frame each file, so moving bytes between files changes the digest.
        hasher.update(name.encode() + b"\0")
        hasher.update(size.to_bytes(8, "big"))
        with opener("rb") as handle:
            total += _feed(hasher, handle)
    return Content(f"sha256:{hasher.hexdigest()}", total)


def _feed(hasher: "hashlib._Hash", handle: IO[bytes]) -> int:
    size = 0
    while chunk := handle.read(CHUNK_BYTES):
        hasher.update(chunk)
        size += len(chunk)
    return size
