"""Code packages (crucible.artifacts.code_package): one tree packs to one digest whatever its
mtimes, owners' umask or machine; a git work tree packs only what git does not ignore; and an
archive is unpacked read-only only when every entry stays inside, its digest checked first."""

import io
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crucible.artifacts import code_package
from crucible.artifacts.code_package import PackageCorrupt, PackageError


def tree(root: Path) -> Path:
    (root / "team_pkg").mkdir(parents=True)
    (root / "team_pkg" / "__init__.py").write_text("")
    (root / "team_pkg" / "reward.py").write_text("def reward(*a, **k):\n    return []\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    return root


def names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_two_packs_of_one_tree_with_other_mtimes_and_modes_give_one_digest(
    tmp_path: Path,
) -> None:
    first = code_package.pack(tree(tmp_path / "a"))
    second_root = tree(tmp_path / "b")
    for path in second_root.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    (second_root / "team_pkg" / "reward.py").chmod(0o600)  # another umask: no execute bit kept
    (second_root / "team_pkg" / "__pycache__").mkdir()
    (second_root / "team_pkg" / "__pycache__" / "reward.cpython-311.pyc").write_bytes(b"\0")
    second = code_package.pack(second_root)
    assert first.digest == second.digest and first.data == second.data
    assert first.files == 3
    assert names(first.data) == ["run.sh", "team_pkg/__init__.py", "team_pkg/reward.py"]
    with tarfile.open(fileobj=io.BytesIO(first.data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, 0, "")}
    assert members["run.sh"].mode == 0o755 and members["team_pkg/reward.py"].mode == 0o644
    changed = tree(tmp_path / "c")
    (changed / "team_pkg" / "reward.py").write_text("def reward(*a, **k):\n    return [1]\n")
    assert code_package.pack(changed).digest != first.digest


def test_in_a_git_work_tree_only_what_git_does_not_ignore_is_packed(tmp_path: Path) -> None:
    repo = tree(tmp_path / "repo")
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("weights/\n*.log\n")
    (repo / "weights").mkdir()
    (repo / "weights" / "big.bin").write_bytes(b"x" * 1000)
    (repo / "train.log").write_text("noise\n")
    git(repo, "add", "team_pkg/__init__.py")  # tracked, and the rest untracked: both packed
    packed = code_package.pack(repo)
    assert names(packed.data) == [
        ".gitignore",
        "run.sh",
        "team_pkg/__init__.py",
        "team_pkg/reward.py",
    ]
    # A subdirectory of the work tree packs its own files, named from it.
    assert names(code_package.pack(repo / "team_pkg").data) == ["__init__.py", "reward.py"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root: root.mkdir(), "holds no files to pack"),
        (lambda root: None, "is not a directory"),
    ],
)
def test_a_missing_or_empty_directory_is_refused(
    tmp_path: Path, setup: Callable[[Path], object], message: str
) -> None:
    root = tmp_path / "pkg"
    setup(root)
    with pytest.raises(PackageError, match=message):
        code_package.pack(root)


def test_a_package_over_the_limit_is_refused_naming_its_largest_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path / "pkg")
    (root / "model.bin").write_bytes(b"\0" * 4096)
    monkeypatch.setattr(code_package, "MAX_PACKAGE_BYTES", 2048)
    with pytest.raises(PackageError, match=r"more than a code package may hold .*model\.bin"):
        code_package.pack(root)


def test_links_pack_as_links_only_when_they_stay_inside(tmp_path: Path) -> None:
    root = tree(tmp_path / "pkg")
    (root / "alias.py").symlink_to("team_pkg/reward.py")
    packed = code_package.pack(root)
    into = tmp_path / "out"
    code_package.unpack(packed.data, into, what="test")
    assert (into / "alias.py").is_symlink() and "def reward" in (into / "alias.py").read_text()
    (tmp_path / "secret").write_text("no")
    (root / "leak").symlink_to("../secret")
    with pytest.raises(PackageError, match="outside the package"):
        code_package.pack(root)


def test_unpacked_files_are_read_only_and_keep_their_execute_bit(tmp_path: Path) -> None:
    packed = code_package.pack(tree(tmp_path / "pkg"))
    into = tmp_path / "out"
    code_package.unpack(packed.data, into, what="test")
    assert stat.S_IMODE((into / "run.sh").stat().st_mode) == 0o555
    assert stat.S_IMODE((into / "team_pkg" / "reward.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((into / "team_pkg").stat().st_mode) == 0o555
    with pytest.raises(PackageError, match="not empty"):
        code_package.unpack(packed.data, into, what="test")


def test_a_python_without_tarfiles_filters_unpacks_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian 12's Python 3.11.2, the workload image's, predates `extractall(filter=...)`."""
    packed = code_package.pack(tree(tmp_path / "pkg"))
    monkeypatch.delattr(tarfile, "data_filter")
    real = tarfile.TarFile.extractall

    def old_extractall(self: tarfile.TarFile, path: Path, members: Any = None) -> None:
        real(self, path, members=members)

    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    into = tmp_path / "out"
    code_package.unpack(packed.data, into, what="test")
    assert (into / "team_pkg" / "reward.py").read_bytes() == (
        tmp_path / "pkg" / "team_pkg" / "reward.py"
    ).read_bytes()
    assert stat.S_IMODE((into / "team_pkg" / "reward.py").stat().st_mode) == 0o444


def archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, content in members:
            info.size = len(content) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(content) if info.isfile() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([(member("../evil.py"), b"x")], "a path outside"),
        ([(member("pkg/../../evil.py"), b"x")], "a path outside"),
        ([(member("/etc/evil.py"), b"x")], "a path outside"),
        ([(member("up", tarfile.SYMTYPE, "../.."), b"")], "a link 'up' to '../..', outside"),
        ([(member("abs", tarfile.SYMTYPE, "/etc/passwd"), b"")], "a link 'abs' to '/etc/passwd'"),
        ([(member("hard", tarfile.LNKTYPE, "x"), b"")], "neither a file, a directory nor a link"),
        ([(member("dev", tarfile.CHRTYPE), b"")], "neither a file, a directory nor a link"),
        ([(member("a.py"), b"1"), (member("./a.py"), b"2")], "holds './a.py' twice"),
    ],
)
def test_unpacking_refuses_entries_that_escape_or_are_not_files_and_writes_nothing(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], message: str
) -> None:
    data = archive((member("fine.py"), b"ok"), *members)
    into = tmp_path / "deep" / "out"
    with pytest.raises(PackageError, match=message):
        code_package.unpack(data, into, what="the archive")
    assert not into.exists()
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "deep" / "evil.py").exists()


def test_a_corrupt_or_truncated_archive_is_refused(tmp_path: Path) -> None:
    packed = code_package.pack(tree(tmp_path / "pkg"))
    with pytest.raises(PackageError, match="is not a tar archive"):
        code_package.check(b"not a tar at all" * 100, what="junk.tar")
    with pytest.raises(PackageError, match="truncated"):
        code_package.check(packed.data[:700], what="cut.tar")  # inside a file's data
    # Cut where a header would start, tarfile takes the archive as ending there.
    with pytest.raises(PackageError, match=r"cut\.tar is truncated"):
        code_package.check(packed.data[: 2 * tarfile.BLOCKSIZE], what="cut.tar")
    assert code_package.check(packed.data, what="whole.tar") == 3


def test_a_changed_archive_fails_naming_both_digests_and_the_cache_is_checked_again(
    tmp_path: Path,
) -> None:
    packed = code_package.pack(tree(tmp_path / "pkg"))
    stored = tmp_path / "stored.tar"
    stored.write_bytes(packed.data)
    cache = tmp_path / "cache"
    unpacked = code_package.fetch_cached(stored.as_uri(), packed.digest, cache, what="package 1")
    assert unpacked == cache / packed.digest.removeprefix("sha256:")
    assert (unpacked / "team_pkg" / "reward.py").is_file()
    assert code_package.fetch_cached(stored.as_uri(), packed.digest, cache, what="p") == unpacked

    tampered = packed.data.replace(b"return []", b"return [9]")
    stored.write_bytes(tampered)
    found = code_package.digest_of(tampered)
    with pytest.raises(PackageCorrupt) as caught:
        code_package.fetch_cached(stored.as_uri(), packed.digest, cache, what="package 1")
    assert f"expected {packed.digest}, found {found}" in str(caught.value)
    assert str(caught.value).startswith(f"package 1 at {stored.as_uri()} does not match")
    with pytest.raises(PackageError, match="cannot be read"):
        code_package.read_verified((tmp_path / "gone.tar").as_uri(), packed.digest, what="p")
