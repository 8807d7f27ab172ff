"""Storage a project may name: checked when a URI is registered or a run submitted (a 422
naming it), and again by retention and recovery before they delete or read files, since a row
stored before these checks existed may name anything.

A run's checkpoint storage is also refused at submit when its pods could not use it (object
storage that does not answer or has no such bucket): found then, the mistake costs a 422;
found by the workload, it costs a queue wait and a failed first save.
"""

import os
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from crucible.artifacts import remote, storage
from crucible.db.tables import Experiment, Run
from crucible.domain.errors import InvalidInput
from crucible.domain.storage_uris import (
    RUNS_DIR,
    Location,
    StorageLayout,
    build_layout,
    location_of,
    require_usable_uri,
)
from crucible.settings import Settings, load_settings

FIELD = "manifest.spec.checkpoints.storage"
_LAYOUT_KEY = "crucible.storage_layout"


def layout_of(settings: Settings) -> StorageLayout:
    return build_layout(
        settings.storage_roots, settings.home, settings.resolved_mlflow_artifact_root
    )


def session_info(settings: Settings) -> dict[str, Any]:
    """What a session factory's `info` carries so that retention and recovery, which get
    only a session, check URIs against this process's layout."""
    return {_LAYOUT_KEY: layout_of(settings)}


def session_layout(session: Session) -> StorageLayout:
    layout = session.info.get(_LAYOUT_KEY)
    return layout if isinstance(layout, StorageLayout) else layout_of(load_settings())


def ownership_problem(
    session: Session,
    layout: StorageLayout,
    *,
    project_id: int,
    uri: str,
    run: Run | None = None,
    shared_ok: bool = False,
) -> str | None:
    """Why `uri` is not the project's to name, or None. Checkpoints (`shared_ok` False) must
    lie in the project's own storage, or in the folder the platform assigned to `run`;
    datasets and artifacts may also lie in shared storage. For a local path the real path,
    links resolved, must pass too: a link in a project's folder may point into another's."""
    location = location_of(uri)
    if location is None:
        return "is not a file:/// path or an s3://bucket/key URI; the platform reads no other"
    problem = _placement_problem(session, layout, project_id, location, run, shared_ok)
    if problem is not None or location.scheme != "file":
        return problem
    real = location_of(Path(os.path.realpath(location.path())).as_uri())
    if real is None or real == location:
        return None
    if _placement_problem(session, layout, project_id, real, run, shared_ok) is not None:
        return f"leads, through a link, to {real.uri()}, which is not the project's storage"
    return None


def _placement_problem(
    session: Session,
    layout: StorageLayout,
    project_id: int,
    location: Location,
    run: Run | None,
    shared_ok: bool,
) -> str | None:
    if run is not None and _in_run_storage(session, layout, run, location):
        return None
    placement = layout.place(location)
    roots = ", ".join(r.uri() + "/" for r in layout.roots)
    if placement is None:
        return f"is outside the allowed storage roots ({roots})"
    if placement.owner is None:
        if placement.shared and shared_ok:
            return None
        return (
            f"is not in this project's storage; write it under "
            f"{' or '.join(layout.project_prefixes(project_id))} or in a folder the platform "
            f"gave one of the project's runs (<root>/{RUNS_DIR}/<run id>/)"
        )
    kind, ident = placement.owner
    owner: int | None = ident
    if kind == "run":
        owner_run = session.get(Run, ident)
        owner = owner_run.project_id if owner_run is not None else None
    elif kind == "experiment":
        experiment = session.get(Experiment, ident)
        owner = experiment.project_id if experiment is not None else None
    if owner == project_id:
        return None
    return f"lies in the storage of another project or of one of its runs ({kind} {ident})"


def _in_run_storage(session: Session, layout: StorageLayout, run: Run, location: Location) -> bool:
    """Inside `<spec.checkpoints.storage>/runs/<run id>/`, where the run's own checkpoints go
    when its spec names a storage, and that storage is one its project may name (checked at
    submit, and again here for runs submitted before that check)."""
    prefix = ((run.manifest.get("spec") or {}).get("checkpoints") or {}).get("storage")
    base = location_of(prefix) if isinstance(prefix, str) else None
    if base is None:
        return False
    folder = Location(base.scheme, (*base.parts, RUNS_DIR, str(run.id)))
    if not location.under(folder):
        return False
    return base in layout.roots or (
        _placement_problem(session, layout, run.project_id, base, None, shared_ok=True) is None
    )


def require_project_uri(
    session: Session,
    layout: StorageLayout,
    *,
    project_id: int,
    uri: str,
    run: Run | None = None,
    shared_ok: bool = False,
    field: str = "uri",
) -> None:
    """Refuse (422, naming `field` and the URI) what `ownership_problem` refuses."""
    require_usable_uri(uri, field=field)
    problem = ownership_problem(
        session, layout, project_id=project_id, uri=uri, run=run, shared_ok=shared_ok
    )
    if problem is not None:
        raise InvalidInput(field, uri, problem, location="body")


def require_checkpoint_uri(
    session: Session, layout: StorageLayout, *, run_id: int, uri: str
) -> None:
    """Refuse a checkpoint of run `run_id` outside its project's storage: retention deletes
    checkpoints' files and recovery reads them."""
    run = session.get_one(Run, run_id)
    require_project_uri(session, layout, project_id=run.project_id, uri=uri, run=run)


def require_usable_storage(
    session: Session, layout: StorageLayout, *, project_id: int, manifest: Any
) -> None:
    """Refuse a run whose `spec.checkpoints.storage` is not a root, the project's own or
    shared storage, or that its pods could not reach."""
    checkpoints = getattr(manifest.spec, "checkpoints", None)
    uri = getattr(checkpoints, "storage", None)
    if not uri:
        return
    location = require_usable_uri(uri, field=FIELD)
    if location not in layout.roots:
        problem = ownership_problem(session, layout, project_id=project_id, uri=uri, shared_ok=True)
        if problem is not None:
            raise InvalidInput(FIELD, uri, problem, location="body")
    if storage.local_path(uri) is not None:
        return
    problem = remote.reachable_problem(uri)
    if problem is not None:
        raise InvalidInput(
            FIELD,
            uri,
            f"cannot be used: {problem}. The control plane reaches storage with the same "
            "credentials as the run's pods; check the URI, the bucket and the endpoint",
            location="body",
        )
