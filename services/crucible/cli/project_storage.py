"""Local files the server refuses where they are, copied into the project's own storage.

The server accepts dataset and artifact URIs only inside storage a project may name (its
prefix, its runs' folders, the configured roots: docs/storage.md), so a file in a checkout
is refused where it lies. When this CLI shares the server's home, as with `crucible up`, it
copies such files to `<home>/projects/<project id>/<section>/<name>/<digest>/` and registers
that copy. The folder is named by the content's digest, so the same files again land on the
same copy and an earlier version's files are never replaced.
"""

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from crucible.artifacts.digest import content_of
from crucible.cli.output import console
from crucible.client import ApiError, CrucibleClient
from crucible.domain.errors import CrucibleError
from crucible.settings import load_settings

T = TypeVar("T")
DIGEST_CHARS = 16
"""Hex digits of the content digest that name the copy's folder."""


def refused_for_storage(exc: ApiError) -> bool:
    """Whether the API refused a registration because its URI is outside the project's
    storage (a 422 at `body.uri`), as opposed to any other refusal."""
    if exc.status != 422 or not isinstance(exc.detail, list):
        return False
    return any(
        isinstance(error, dict) and list(error.get("loc", []))[-1:] == ["uri"]
        for error in exc.detail
    )


def project_id(api: CrucibleClient, name: str) -> int:
    cursor: str | None = None
    while True:
        page = api.list_projects(cursor)
        for project in page.items:
            if project.name == name:
                return project.id
        cursor = page.next_cursor
        if cursor is None:
            raise CrucibleError(f"project {name!r} not found")


def register_where_accepted(
    api: CrucibleClient,
    *,
    project: str,
    section: str,
    name: str,
    path: Path,
    copy: bool,
    publish: Callable[[Path], T],
) -> T:
    """`publish(path)`, or, where the server refuses the place `path` lies in and `copy` is
    allowed, `publish` of its copy in the project's storage (made once per content)."""
    if not copy:
        return publish(path)
    target = copy_target(api, project=project, section=section, name=name, path=path)
    if target is not None and target.exists():
        return publish(target)  # this content was copied before: that copy is its version
    try:
        return publish(path)
    except ApiError as exc:
        if target is None or not refused_for_storage(exc):
            raise
    copy_into(path, target)
    console.print(f"copied {path} into the project's storage", highlight=False, soft_wrap=True)
    return publish(target)


def copy_target(
    api: CrucibleClient, *, project: str, section: str, name: str, path: Path
) -> Path | None:
    """Where `path`'s copy goes under this CLI's home; None when this machine has no such
    home (the server is elsewhere, and would not find the copy)."""
    home = load_settings().home
    if not home.is_dir():
        return None
    digest = content_of(path).digest.partition(":")[2]
    folder = home / "projects" / str(project_id(api, project)) / section / name
    return folder / digest[:DIGEST_CHARS] / path.name


def copy_into(path: Path, target: Path) -> None:
    # Copied beside the target, then renamed: an interrupted copy is never what a later
    # registration finds in place.
    staging = target.parent.with_name(f".partial-{uuid.uuid4().hex}")
    staging.mkdir(parents=True)
    try:
        if path.is_dir():
            shutil.copytree(path, staging / path.name)
        else:
            shutil.copy2(path, staging / path.name)
        staging.rename(target.parent)
    except FileExistsError:  # another registration of the same content got there first
        pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
