"""The mlflow-artifacts proxy on Crucible's storage layer (crucible.artifacts.remote): the
files of runs (`<experiment>/<run>/artifacts/...`) and of logged models
(`<experiment>/models/<model>/artifacts/...`) under one root, a local directory or a bucket.

The first segments of a path name its owner, and the owner's project decides who may read
or write it, as for every other object."""

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
        elif len(parts) >= 2:
            run = session.get(Run, ids.parse_id(parts[1], "Run"))
            if run is None or run.experiment_id != experiment.id:
                raise missing("Run", parts[1])
        elif role is not Role.viewer:
            raise invalid(f"Artifacts are written under a run or a model, not at {path!r}")
        return "/".join(parts)

    def write(self, path: str, chunks: Iterator[bytes]) -> None:
        fs, target = remote.filesystem(self.uri(path))
        parent = target.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        with fs.open(target, "wb") as out:
            for chunk in chunks:
                out.write(chunk)

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
            if entry["type"] == "directory":
                files.append({"path": name, "is_dir": True})
            else:
                files.append({"path": name, "is_dir": False, "file_size": int(entry["size"])})
        return sorted(files, key=lambda f: f["path"])

    def content(self, path: str) -> Content | None:
        return remote.content(self.uri(path))


def clean(path: str) -> list[str]:
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if any(p == ".." or "\\" in p or any(ord(c) < 0x20 for c in p) for p in parts):
        raise invalid(f"Invalid artifact path {path!r}: no '..' segments or control characters")
    return parts
