"""Where checkpoints, datasets and artifacts may live: URIs that cannot climb out of their
directory, of a scheme the platform reads itself (`file`, `s3`), under a storage root, and
inside the storage of the project that registers them.

Each storage root (CRUCIBLE_STORAGE_ROOTS, and always the local home, where the embedded
executor writes) is laid out the same way:

- `<root>/runs/<run id>/...`: what the platform assigned to one run (its checkpoints, its
  outputs); it belongs to that run's project.
- `<root>/projects/<project id>/...`: a project's own prefix, for files its people place
  themselves (`crucible datasets register --to <root>/projects/<id>/datasets`).
- anything else under a configured root is shared storage every project's runs can read; a
  file there may be registered as a dataset or an artifact, never as a checkpoint, since
  retention deletes checkpoints. Under the home only `packages/` is shared (code packages,
  named by their digest): the rest of it is the control plane's own (its database, tokens).

Project ids, not names: a name comes back after a project is deleted, an id never does.

Workloads, evals and the control plane open these URIs with credentials that reach every
project's files, so a URI naming `/etc`, another project's run folder or an `http://` address
would have the platform read or delete what its caller could not.
"""

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from crucible.domain.errors import InvalidInput

ALLOWED_SCHEMES = ("file", "s3")
RUNS_DIR = "runs"
PROJECTS_DIR = "projects"
HOME_SHARED_DIRS = ("packages",)


def uri_problem(uri: str) -> str | None:
    """Why `uri` is unsafe to store, or None. Needs no settings, so the schema checks it."""
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in uri):
        return "must not contain control characters or backslashes"
    parsed = urlparse(uri)
    if parsed.scheme == "" and not uri.startswith("/"):
        return "must be an absolute path or a URI with a scheme (file:///..., s3://...)"
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        return "a file:// URI must name no host: use file:///absolute/path"
    path = parsed.path
    for _ in range(3):  # %252e%252e decodes to %2e%2e, then to ..
        path = unquote(path)
    if ".." in path.split("/"):
        return "must not contain a '..' path segment"
    return None


@dataclass(frozen=True)
class Location:
    """A URI reduced to what comparing places needs: its scheme and its path segments (for
    s3 the bucket first), with empty and `.` segments dropped."""

    scheme: str
    parts: tuple[str, ...]

    def path(self) -> str:
        """The local path of a `file` location."""
        return "/" + "/".join(self.parts)

    def uri(self) -> str:
        joined = "/".join(self.parts)
        return f"file:///{joined}" if self.scheme == "file" else f"s3://{joined}"

    def under(self, prefix: "Location") -> tuple[str, ...] | None:
        """The segments below `prefix`, or None when this is not inside it."""
        n = len(prefix.parts)
        if self.scheme != prefix.scheme or self.parts[:n] != prefix.parts:
            return None
        return self.parts[n:]


def location_of(uri: str) -> Location | None:
    """The place `uri` names, or None when it is unsafe or of a scheme the platform does not
    read itself (`http`, `gs`, ...): nothing is fetched from such a URI on a user's word."""
    if uri_problem(uri) is not None:
        return None
    parsed = urlparse(uri)
    if parsed.query or parsed.fragment or parsed.params:
        return None
    if parsed.scheme in ("", "file"):
        # As `artifacts.storage.local_path` reads it: decoded once.
        return Location("file", _segments(unquote(parsed.path)))
    if parsed.scheme == "s3" and parsed.netloc and "%" not in uri:
        return Location("s3", (parsed.netloc, *_segments(parsed.path)))
    return None


def _segments(path: str) -> tuple[str, ...]:
    return tuple(p for p in posixpath.normpath("/" + path).split("/") if p not in ("", "."))


@dataclass(frozen=True)
class Placement:
    """Where a URI lies in the layout: the root it is under and its place there."""

    root: Location
    owner: tuple[str, int] | None
    """("run", id), ("project", id) or ("experiment", id) for a URI strictly inside such a
    folder, else None."""
    shared: bool
    """Under the root, outside every run's and project's folder, where sharing is allowed."""


@dataclass(frozen=True)
class StorageLayout:
    """The storage roots, each laid out as the module's docstring says."""

    roots: tuple[Location, ...]
    homes: tuple[Location, ...] = ()
    """The local home (and its real path, if that differs)."""
    mlflow_roots: tuple[Location, ...] = ()
    """Where the MLflow artifact proxy keeps files, `<experiment id>/...` below it."""

    def place(self, location: Location) -> Placement | None:
        """Where `location` lies, or None when it is under no root."""
        for mlflow_root in self.mlflow_roots:
            rest = location.under(mlflow_root)
            if rest is not None:
                owner = ("experiment", int(rest[0])) if len(rest) > 1 and _is_id(rest[0]) else None
                return Placement(mlflow_root, owner, shared=False)
        for root in sorted(self.roots, key=lambda r: -len(r.parts)):
            rest = location.under(root)
            if rest is None:
                continue
            if len(rest) >= 2 and rest[0] in (RUNS_DIR, PROJECTS_DIR):
                owned = len(rest) > 2 and _is_id(rest[1])
                kind = "run" if rest[0] == RUNS_DIR else "project"
                return Placement(root, (kind, int(rest[1])) if owned else None, shared=False)
            if rest and rest[0] in (RUNS_DIR, PROJECTS_DIR):
                return Placement(root, None, shared=False)
            if root in self.homes:
                shared = len(rest) > 1 and rest[0] in HOME_SHARED_DIRS
            else:
                shared = len(rest) > 0
            return Placement(root, None, shared=shared)
        return None

    def project_prefixes(self, project_id: int) -> list[str]:
        """The prefixes a project's people may write under themselves, for messages."""
        return [f"{root.uri()}/{PROJECTS_DIR}/{project_id}/" for root in self.roots]


def _is_id(segment: str) -> bool:
    return segment.isascii() and segment.isdigit() and segment == str(int(segment))


def build_layout(roots: Sequence[str], home: Path, mlflow_root: str | None = None) -> StorageLayout:
    """The layout of the configured `roots` and of the local `home`, which is always a root:
    the embedded executor writes every local run's checkpoints and outputs there. A local
    root counts under its real path too, since a URI may name either (`Path.resolve()`)."""
    found = [location_of(root) for root in roots]
    unusable = [root for root, loc in zip(roots, found, strict=True) if loc is None]
    if unusable:
        raise ValueError(f"storage roots {unusable} are not file:// or s3:// URIs")
    homes = _with_real_paths([location_of(home.absolute().as_uri())])
    locations = _with_real_paths([*found, *homes])
    mlflow = _with_real_paths([location_of(mlflow_root)] if mlflow_root else [])
    return StorageLayout(locations, homes, mlflow)


def _with_real_paths(found: Sequence[Location | None]) -> tuple[Location, ...]:
    out: list[Location] = []
    for location in found:
        if location is None:
            continue
        variants: list[Location | None] = [location]
        if location.scheme == "file":
            variants.append(location_of(Path(os.path.realpath(location.path())).as_uri()))
        out.extend(v for v in variants if v is not None and v not in out)
    return tuple(out)


def require_usable_uri(uri: str, *, field: str = "uri") -> Location:
    """The location of `uri`, or a 422 naming it when the platform would not read it."""
    location = location_of(uri)
    if location is None:
        raise InvalidInput(
            field,
            uri,
            "must be a file:/// path or an s3://bucket/key URI (no query); the platform reads "
            "no other scheme",
            location="body",
        )
    return location
