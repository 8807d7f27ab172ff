"""The mlflow-artifacts proxy on Crucible's storage layer (crucible.artifacts.remote): the
files of runs (`<experiment>/<run>/artifacts/...`) and of logged models
(`<experiment>/models/<model>/artifacts/...`) under one root, a local directory or a bucket.

The first segments of a path name its owner, and the owner's project decides who may read
or write it, as for every other object."""

import contextlib
import errno
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from crucible.artifacts import remote
from crucible.artifacts.digest import Content
from crucible.db.tables import Experiment, LoggedModel, Run
from crucible.domain.enums import Role
from crucible.mlflow_compat import ids
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.errors import invalid, missing

CHUNK_BYTES = 1 << 20
# A path must fit a filesystem's: a segment its NAME_MAX, the whole well inside PATH_MAX
# with the store's root before it.
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255
MAX_PATH_DEPTH = 64
# An upload is written under this name beside its target, then renamed onto it: a failed
# or refused one leaves what was there. Listings skip such names and no path may use one.
PARTIAL_PREFIX = ".crucible-partial-"


@dataclass(frozen=True)
class Location:
    root: str

    def uri(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def authorize(self, session: Session, caller: Caller, path: str, role: Role) -> str:
        """The clean path, once the caller may act on its owner with `role`."""
        parts = clean(path)
        if not parts:
            raise invalid("An artifact path must name an experiment's run or model")
        experiment = session.get(Experiment, ids.parse_id(parts[0], "Experiment"))
        owner = experiment.project_id if experiment else None
        caller.owns(owner, role, entity="Experiment", key=parts[0])
        assert experiment is not None
        if len(parts) >= 3 and parts[1] == "models":
            model = session.get(LoggedModel, parts[2])
            if model is None or model.experiment_id != experiment.id:
                raise missing("Logged model", parts[2])
            owner_parts = 3
        elif len(parts) >= 2:
            run = session.get(Run, ids.parse_id(parts[1], "Run"))
            if run is None or run.experiment_id != experiment.id:
                raise missing("Run", parts[1])
            owner_parts = 2
        else:
            owner_parts = len(parts) + 1
        # Files go in the owner's artifacts/ folder, never beside it nor in its place.
        inside = parts[owner_parts : owner_parts + 1] == ["artifacts"]
        if role is not Role.viewer and not (inside and len(parts) > owner_parts + 1):
            raise invalid(
                f"Artifacts are written under a run's or a model's artifacts/ folder, not at "
                f"{path!r}"
            )
        if len(parts) > owner_parts and not inside:
            raise missing("Artifact", path)
        return "/".join(parts)

    def write(self, path: str, chunks: Iterator[bytes]) -> None:
        """The file at `path`, replaced whole once every chunk is written, or left as it was."""
        fs, target = remote.filesystem(self.uri(path))
        parent = target.rsplit("/", 1)[0]
        partial = f"{parent}/{PARTIAL_PREFIX}{uuid.uuid4().hex}"
        with _refused_as_invalid(path):
            fs.makedirs(parent, exist_ok=True)
            if fs.isdir(target):
                raise invalid(f"Artifact path {path!r} is a folder; a file cannot replace it")
            try:
                with fs.open(partial, "wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
                fs.mv(partial, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    fs.rm(partial)
                raise

    def read(self, path: str) -> Iterator[bytes]:
        fs, target = remote.filesystem(self.uri(path))
        if not fs.isfile(target):
            raise missing("Artifact", path)

        def chunks() -> Iterator[bytes]:
            with fs.open(target, "rb") as source:
                while block := source.read(CHUNK_BYTES):
                    yield block

        return chunks()

    def list(self, path: str) -> list[dict[str, Any]]:
        fs, target = remote.filesystem(self.uri(path))
        fs.invalidate_cache(target)
        if not fs.isdir(target):
            return []
        files = []
        base = target.rstrip("/")
        for entry in fs.ls(target, detail=True):
            name = entry["name"].rstrip("/")[len(base) + 1 :]
            if name.startswith(PARTIAL_PREFIX):
                continue
            if entry["type"] == "directory":
                files.append({"path": name, "is_dir": True})
            else:
                files.append({"path": name, "is_dir": False, "file_size": int(entry["size"])})
        return sorted(files, key=lambda f: f["path"])

    def content(self, path: str) -> Content | None:
        return remote.content(self.uri(path))


def clean(path: str) -> list[str]:
    if len(path.encode(errors="replace")) > MAX_PATH_BYTES:
        raise invalid(
            f"Invalid artifact path {path[:100]!r}...: {len(path)} characters, more than "
            f"{MAX_PATH_BYTES} bytes"
        )
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if any(p == ".." or "\\" in p or any(ord(c) < 0x20 for c in p) for p in parts):
        raise invalid(f"Invalid artifact path {path!r}: no '..' segments or control characters")
    if len(parts) > MAX_PATH_DEPTH:
        raise invalid(
            f"Invalid artifact path {path[:100]!r}...: {len(parts)} folders deep, more than "
            f"{MAX_PATH_DEPTH}"
        )
    for part in parts:
        if len(part.encode(errors="replace")) > MAX_SEGMENT_BYTES:
            raise invalid(
                f"Invalid artifact path {path[:100]!r}: the name {part[:40]!r}... is longer "
                f"than {MAX_SEGMENT_BYTES} bytes"
            )
        if part.startswith(PARTIAL_PREFIX):
            raise invalid(f"Invalid artifact path {path!r}: {PARTIAL_PREFIX}* names are Crucible's")
    return parts


@contextlib.contextmanager
def _refused_as_invalid(path: str) -> Iterator[None]:
    """A file where the path needs a folder, or a folder where it needs a file, is the
    request's error, not the server's."""
    try:
        yield
    except (NotADirectoryError, FileExistsError, IsADirectoryError):
        raise invalid(
            f"Invalid artifact path {path!r}: a file stands where it needs a folder, or a "
            "folder where it needs a file"
        ) from None
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        raise invalid(f"Invalid artifact path {path[:100]!r}: too long for the store") from None
