"""Code packages on a Python without tarfile's `data` filter (Debian 12's 3.11.2, the
workload images'): the unpacker's own check is all that stands between an archive and the
file system, so it resolves each link through the archive's other links as the file
system will, and refuses any that leads out, whatever the order of the entries."""

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from crucible.artifacts import code_package
from crucible.artifacts.code_package import PackageError


@pytest.fixture
def old_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile as Python 3.11.2 has it: no `data_filter`, no `filter=` on extractall."""
    monkeypatch.delattr(tarfile, "data_filter")
    real = tarfile.TarFile.extractall

    def old_extractall(self: tarfile.TarFile, path: Path, members: Any = None) -> None:
        real(self, path, members=members, filter="fully_trusted")  # what 3.11.2 did

    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)


FILE, DIRECTORY, LINK = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE


def archive(*entries: tuple[str, bytes, str]) -> bytes:
    """A tar of `(name, type, link target)`; each file holds b"escaped"."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, target in (("fine.py", FILE, ""), *entries):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            content = b"escaped" if kind == FILE else b""
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content else None)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        # The chain: each target stays inside read as text (`a/..` is `.`), not followed
        # (`a` is the top, so `a/..` is above it).
        ([("a", LINK, "."), ("b", LINK, "a/.."), ("c", LINK, "b/../../etc")], "link 'b' to 'a/..'"),
        ([("a", LINK, "."), ("b", LINK, "a/.."), ("b/escaped", FILE, "")], "link 'b' to 'a/..'"),
        # The other order: `a` leads through `b`, which comes after it.
        ([("a", LINK, "b/.."), ("b", LINK, "."), ("a/escaped", FILE, "")], "link 'a' to 'b/..'"),
        ([("d", DIRECTORY, ""), ("d/up", LINK, ".."), ("d/x", LINK, "up/..")], "'d/x' to 'up/..'"),
        ([("one", LINK, "two"), ("two", LINK, "one")], "link 'one' to 'two'"),  # a loop
        ([("nothing", LINK, "")], "link 'nothing' to ''"),
        # Through a link that stays inside: the file lands wherever the link leads.
        ([("pkg", DIRECTORY, ""), ("alias", LINK, "pkg"), ("alias/escaped", FILE, "")], "under"),
        ([("alias/escaped", FILE, ""), ("alias", LINK, "pkg")], "under the link 'alias'"),
        ([("abs", LINK, "/etc")], "link 'abs' to '/etc'"),
        ([("../escaped", FILE, "")], "a path outside"),
        ([("/tmp/escaped", FILE, "")], "a path outside"),
        ([("hard", tarfile.LNKTYPE, "../../etc/passwd")], "neither a file, a directory nor"),
        ([("fifo", tarfile.FIFOTYPE, "")], "neither a file, a directory nor a link"),
        ([("dev", tarfile.BLKTYPE, "")], "neither a file, a directory nor a link"),
        ([(".", FILE, "")], "names the directory it unpacks to"),
    ],
)
def test_an_entry_that_leads_out_is_refused_and_nothing_is_written(
    tmp_path: Path, old_python: None, entries: list[tuple[str, bytes, str]], message: str
) -> None:
    assert not hasattr(tarfile, "data_filter")  # the unpacker's own check, alone
    into = tmp_path / "deep" / "out"
    data = archive(*entries)
    with pytest.raises(PackageError, match=message):
        code_package.check(data, what="the archive")
    with pytest.raises(PackageError, match=message):
        code_package.unpack(data, into, what="the archive")
    assert not into.exists()
    assert not list(tmp_path.rglob("escaped"))


def test_links_that_stay_inside_unpack_as_links(tmp_path: Path, old_python: None) -> None:
    data = archive(
        ("pkg", DIRECTORY, ""),
        ("pkg/reward.py", FILE, ""),
        ("here", LINK, "./"),
        ("alias.py", LINK, "pkg/reward.py"),
        ("pkg/back.py", LINK, "../alias.py"),  # through another link, still inside
        ("pkg/up", LINK, ".."),
    )
    into = tmp_path / "out"
    code_package.unpack(data, into, what="the archive")
    assert (into / "pkg" / "back.py").read_bytes() == b"escaped"
    assert (into / "here").resolve() == (into / "pkg" / "up").resolve() == into.resolve()
