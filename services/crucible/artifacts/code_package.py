"""Code packages: a directory of a team's own Python code packed into one archive, registered
as a `code` artifact, and unpacked read-only before a run's workload starts, first on its
PYTHONPATH (docs/storage.md). What makes a run reproducible is the archive's digest, so:

- the archive is a plain tar whose bytes depend only on the files: entries sorted, every
  mtime 0, owner 0:0 with no names, modes 0644 or 0755 (the owner's execute bit kept, as git
  keeps it). Not gzip: its bytes depend on the zlib build too, so one tree would get two
  digests on two machines;
- in a git work tree only the files git does not ignore are packed (tracked and untracked),
  elsewhere every file; `__pycache__` never (bytecode of one interpreter, rewritten by each);
- reading an archive back checks every entry before anything is written: regular files,
  directories and links that stay inside only, names that are relative without `..`.

The fetch (`read_verified`, then `unpack`) runs in the local executor before it starts an
attempt's processes, and in the init container of every pod (`python -m crucible.fetch_code`).
"""

import hashlib
import io
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from crucible.artifacts import remote, storage

MAX_PACKAGE_BYTES = 64 * 2**20
"""Largest archive. A package is code: it is held in memory, downloaded before every pod and
every local attempt starts, and read again each time to check its digest. Data and weights
belong in datasets and artifacts, which are cached and checked on their own."""

ARCHIVE_SUFFIX = ".tar"
_SKIPPED_DIRECTORIES = frozenset({".git", "__pycache__"})


class PackageError(Exception):
    """A directory that cannot be packed, or an archive that cannot be unpacked; the message
    is one sentence naming it."""


class PackageCorrupt(PackageError):
    """The archive at a package's URI is not the one registered (its digest differs)."""


@dataclass(frozen=True)
class Packed:
    data: bytes
    """The archive."""
    digest: str
    """`sha256:<hex>` of `data`, as the artifact records it."""
    files: int
    """Regular files in it (links not counted)."""

    @property
    def file_name(self) -> str:
        """Where it is stored: named by its content, so one name never holds two archives."""
        return self.digest.removeprefix("sha256:") + ARCHIVE_SUFFIX


def pack(directory: Path) -> Packed:
    """The archive of `directory`'s files; PackageError when there are none, when they are
    too large, or when a link points outside it."""
    if not directory.is_dir():
        raise PackageError(f"{directory} is not a directory")
    root = directory.resolve()
    entries = sorted(_package_files(root))
    if not entries:
        raise PackageError(
            f"{directory} holds no files to pack (in a git work tree, only files git does not "
            "ignore are packed)"
        )
    regular = [root / name for name in entries if not (root / name).is_symlink()]
    total = sum(path.stat().st_size for path in regular)
    if total > MAX_PACKAGE_BYTES:
        biggest = max(regular, key=lambda path: path.stat().st_size)
        raise PackageError(
            f"{directory} holds {_mib(total)} of files, more than a code package may hold "
            f"({_mib(MAX_PACKAGE_BYTES)}; the largest is {biggest.relative_to(root)}); register "
            "data and weights as datasets or artifacts, or have git ignore them"
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in entries:
            info = _entry(root, name)
            if info.isfile():
                with (root / name).open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
    data = buffer.getvalue()
    if len(data) > MAX_PACKAGE_BYTES:
        raise PackageError(
            f"the archive of {directory} takes {_mib(len(data))}, more than a code package may "
            f"({_mib(MAX_PACKAGE_BYTES)}): too many small files; have git ignore what the code "
            "does not need"
        )
    return Packed(data, digest_of(data), len(regular))


def check(data: bytes, *, what: str) -> int:
    """The number of regular files of the archive `data`, once every entry is one `unpack`
    writes; PackageError naming `what` (where the archive came from) otherwise."""
    if len(data) > MAX_PACKAGE_BYTES:
        raise PackageError(
            f"{what} takes {_mib(len(data))}, more than a code package may "
            f"({_mib(MAX_PACKAGE_BYTES)})"
        )
    with _open(data, what) as tar:
        return sum(1 for member in _members(tar, data, what) if member.isfile())


def unpack(data: bytes, into: Path, *, what: str) -> None:
    """Write the archive's files under `into` (created if missing, else empty), each file and
    directory below it read-only; nothing is written unless every entry passes `check`."""
    with _open(data, what) as tar:
        members = list(_members(tar, data, what))
        into.mkdir(parents=True, exist_ok=True)
        if any(into.iterdir()):
            raise PackageError(f"cannot unpack {what} into {into}: it is not empty")
        # tarfile's own `data` filter checks the same escapes again as it writes. It came in
        # Python 3.11.4; Debian 12's 3.11.2 (the workload image's) lacks it, and every member
        # passed `_members` either way.
        try:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(into, members=members, filter="data")
            else:
                tar.extractall(into, members=members)  # noqa: S202 - checked above
        except tarfile.TarError as exc:
            raise PackageError(f"{what} cannot be unpacked: {exc}") from None
    _make_read_only(into)


def read_verified(uri: str, digest: str, *, what: str) -> bytes:
    """The archive at `uri`, once its sha256 is `digest`: read once and checked in memory, so
    the bytes unpacked are the bytes checked."""
    try:
        data = _read(uri, what)
    except (OSError, remote.StorageUnavailable) as exc:
        raise PackageError(f"{what} cannot be read at {uri}: {exc}") from None
    found = digest_of(data)
    if found != digest:
        raise PackageCorrupt(
            f"{what} at {uri} does not match its registered digest: expected {digest}, found "
            f"{found}; the run's code is not used"
        )
    return data


def fetch(uri: str, digest: str, into: Path, *, what: str) -> None:
    """The archive at `uri`, checked against `digest`, unpacked read-only into `into`."""
    unpack(read_verified(uri, digest, what=what), into, what=what)


def fetch_cached(uri: str, digest: str, cache_dir: Path, *, what: str) -> Path:
    """`fetch` into `cache_dir/<hex of digest>/` once, and that directory after: the archive
    is read and checked every time, since it may have changed since."""
    data = read_verified(uri, digest, what=what)
    final = cache_dir / digest.removeprefix("sha256:")
    if final.is_dir():
        return final
    partial = final.with_name(storage.TEMP_PREFIX + final.name)
    _remove(partial)
    try:
        unpack(data, partial, what=what)
        partial.chmod(0o555)
        os.rename(partial, final)
    except BaseException:
        _remove(partial)
        if not final.is_dir():  # else another process unpacked the same archive meanwhile
            raise
    return final


def _package_files(root: Path) -> Iterator[str]:
    """Relative POSIX names of what `root` packs: regular files and links, no directories."""
    listed = _git_listed(root)
    names = listed if listed is not None else _walked(root)
    for name in names:
        parts = PurePosixPath(name).parts
        if any(part in _SKIPPED_DIRECTORIES for part in parts):
            continue
        path = root / name
        if path.is_symlink() or path.is_file():
            yield name
        elif path.is_dir():  # a submodule, which git lists as one entry: all of it
            yield from (f"{name}/{inner}" for inner in _walked(path))
        # else a tracked file deleted from the work tree: not part of the code now


def _git_listed(root: Path) -> list[str] | None:
    """What git lists in `root` (tracked, and untracked but not ignored); None when `root` is
    not in a work tree or there is no git."""
    command = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others"]
    try:
        done = subprocess.run(  # noqa: S603 - fixed git arguments, git from PATH as the user's
            [*command, "--exclude-standard"], capture_output=True, check=False
        )
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    return sorted({os.fsdecode(name) for name in done.stdout.split(b"\0") if name})


def _walked(root: Path) -> list[str]:
    found = []
    for directory, subdirectories, files in os.walk(root):
        here = Path(directory)
        for name in list(subdirectories):
            if (here / name).is_symlink():
                files.append(name)  # a link to a directory is packed as the link
                subdirectories.remove(name)
            elif name in _SKIPPED_DIRECTORIES:
                subdirectories.remove(name)
        found += [(here / name).relative_to(root).as_posix() for name in files]
    return found


def _entry(root: Path, name: str) -> tarfile.TarInfo:
    path = root / name
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if path.is_symlink():
        target = os.readlink(path)
        inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if posixpath.isabs(target) or inside == ".." or inside.startswith("../"):
            raise PackageError(
                f"{path} links to {target}, outside the package; copy the file in instead"
            )
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        return info
    mode = path.stat()
    if not stat.S_ISREG(mode.st_mode):
        raise PackageError(f"{path} is not a regular file, so it cannot be packed")
    info.size = mode.st_size
    info.mode = 0o755 if mode.st_mode & stat.S_IXUSR else 0o644
    return info


def _open(data: bytes, what: str) -> tarfile.TarFile:
    try:
        # "r:" and not "r": a compressed stream is not what `pack` writes.
        return tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as exc:
        raise PackageError(f"{what} is not a tar archive ({exc})") from None


def _members(tar: tarfile.TarFile, data: bytes, what: str) -> list[tarfile.TarInfo]:
    """Every entry of `tar` (opened on `data`), once each is checked and every link resolves
    inside, through the archive's other links as the file system will follow them."""
    seen: set[str] = set()
    links: dict[str, str] = {}
    try:
        members = tar.getmembers()
    except (tarfile.TarError, EOFError) as exc:
        raise PackageError(f"{what} is truncated or corrupt ({exc})") from None
    # tarfile takes an archive cut short at a header as one that ends there; only the two
    # zero blocks every tar writer ends with tell the whole archive from a cut one.
    marker = data[tar.offset : tar.offset + 2 * tarfile.BLOCKSIZE]
    if marker != bytes(2 * tarfile.BLOCKSIZE):
        raise PackageError(f"{what} is truncated: it does not end as a tar archive ends")
    for member in members:
        name = member.name
        parts = PurePosixPath(name).parts
        if not name or posixpath.isabs(name) or ".." in parts or "\\" in name:
            raise PackageError(f"{what} holds {name!r}, a path outside the directory it unpacks to")
        normal = posixpath.normpath(name)
        if member.issym():
            if not member.linkname or posixpath.isabs(member.linkname) or normal == ".":
                raise _outside_link(what, member)
            links[normal] = member.linkname
        elif not (member.isfile() or member.isdir()) or member.type == tarfile.GNUTYPE_SPARSE:
            # Hard links too: tarfile writes one by copying or linking a path it resolves
            # itself, which no check here would see.
            raise PackageError(
                f"{what} holds {name!r}, which is neither a file, a directory nor a link"
            )
        elif normal == "." and not member.isdir():
            raise PackageError(f"{what} holds {name!r}, which names the directory it unpacks to")
        if normal in seen:
            raise PackageError(f"{what} holds {name!r} twice")
        seen.add(normal)
    # Checked against the whole archive, not the entries before: a link may lead through
    # one that comes after it (`a` -> `b/..`, then `b` -> `.`, and `a` is the parent).
    for member in members:
        normal = posixpath.normpath(member.name)
        for above in _ancestors(normal):
            if above in links:
                raise PackageError(
                    f"{what} holds {member.name!r} under the link {above!r}: unpacking it "
                    "would write wherever the link leads"
                )
        if member.issym() and not _resolves_inside(normal, links):
            raise _outside_link(what, member)
    return members


def _ancestors(normal: str) -> Iterator[str]:
    """`a`, `a/b` for `a/b/c`: the directories a relative path passes through."""
    parts = PurePosixPath(normal).parts
    for end in range(1, len(parts)):
        yield "/".join(parts[:end])


MAX_LINK_HOPS = 40
"""Links followed in resolving one, as Linux's own limit (ELOOP past it)."""


def _resolves_inside(link: str, links: dict[str, str]) -> bool:
    """Whether the link named `link` leads inside the directory it is unpacked into, where
    `links` (name -> target) are every link of the archive and nothing else is a link: the
    target read from the link's directory one name at a time, each name that is a link
    replaced by its target, `..` taking one name off, never above the top."""
    where: list[str] = list(PurePosixPath(link).parent.parts)
    ahead = list(PurePosixPath(links[link]).parts)
    hops = 0
    while ahead:
        part = ahead.pop(0)
        if part == "..":
            if not where:
                return False
            where.pop()
            continue
        where.append(part)
        target = links.get("/".join(where))
        if target is None:
            continue
        hops += 1
        if hops > MAX_LINK_HOPS or posixpath.isabs(target):
            return False
        where.pop()
        ahead[:0] = PurePosixPath(target).parts
    return True


def _outside_link(what: str, member: tarfile.TarInfo) -> PackageError:
    return PackageError(
        f"{what} holds a link {member.name!r} to {member.linkname!r}, outside the directory "
        "it unpacks to"
    )


def _make_read_only(into: Path) -> None:
    """Every file and directory below `into` read-only (links have no mode of their own),
    deepest first, so each directory is written before it is closed."""
    for directory, subdirectories, files in os.walk(into, topdown=False):
        here = Path(directory)
        for name in files:
            path = here / name
            if not path.is_symlink():
                path.chmod(0o555 if path.stat().st_mode & stat.S_IXUSR else 0o444)
        for name in subdirectories:
            path = here / name
            if not path.is_symlink():
                path.chmod(0o555)


def _read(uri: str, what: str) -> bytes:
    local = storage.local_path(uri)
    if local is not None:
        size = local.stat().st_size
        _require_size(size, uri, what)
        return local.read_bytes()
    fs, root = remote.filesystem(uri)
    fs.invalidate_cache(root)
    _require_size(int(fs.size(root)), uri, what)
    data: bytes = fs.cat_file(root)
    return data


def _require_size(size: int, uri: str, what: str) -> None:
    if size > MAX_PACKAGE_BYTES:
        raise PackageError(
            f"{what} at {uri} takes {_mib(size)}, more than a code package may "
            f"({_mib(MAX_PACKAGE_BYTES)})"
        )


def _remove(path: Path) -> None:
    if not path.exists():
        return
    for directory, _, _ in os.walk(path):  # read-only directories cannot be emptied
        Path(directory).chmod(0o755)
    shutil.rmtree(path)


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
