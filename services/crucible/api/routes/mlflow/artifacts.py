"""The mlflow-artifacts proxy: list, upload and download, stored by Crucible's storage layer;
and the tracking API's own artifact listing of a run."""

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio.from_thread
from fastapi import APIRouter, Request
from fastapi.concurrency import iterate_in_threadpool, run_in_threadpool
from fastapi.responses import StreamingResponse

from crucible.api.deps import Uow
from crucible.api.routes.mlflow.support import (
    API,
    ARTIFACTS,
    CallerDep,
    FieldsDep,
    LocationDep,
    MlflowRoute,
)
from crucible.domain.enums import Role
from crucible.mlflow_compat import ids, runs
from crucible.mlflow_compat.fields import text

router = APIRouter(route_class=MlflowRoute, include_in_schema=False)


@router.get(ARTIFACTS)
def list_proxied(
    fields: FieldsDep, caller: CallerDep, uow: Uow, location: LocationDep
) -> dict[str, Any]:
    with uow() as session:
        path = location.authorize(session, caller, text(fields, "path"), Role.viewer)
    return {"files": location.list(path)}


@router.get(ARTIFACTS + "/{path:path}")
def download(path: str, caller: CallerDep, uow: Uow, location: LocationDep) -> StreamingResponse:
    with uow() as session:
        clean = location.authorize(session, caller, path, Role.viewer)
    return StreamingResponse(
        iterate_in_threadpool(location.read(clean)), media_type="application/octet-stream"
    )


@router.put(ARTIFACTS + "/{path:path}")
async def upload(
    path: str, request: Request, caller: CallerDep, uow: Uow, location: LocationDep
) -> dict[str, Any]:
    def authorize() -> str:
        with uow() as session:
            return location.authorize(session, caller, path, Role.editor)

    clean = await run_in_threadpool(authorize)
    body = request.stream()
    await run_in_threadpool(location.write, clean, _blocking(body))
    return {}


def _blocking(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """The request body as a plain iterator, for the storage write in a worker thread."""

    async def next_chunk() -> bytes | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    while (chunk := anyio.from_thread.run(next_chunk)) is not None:
        if chunk:
            yield chunk


@router.get(API + "/artifacts/list")
def list_run_artifacts(
    fields: FieldsDep, caller: CallerDep, uow: Uow, location: LocationDep
) -> dict[str, Any]:
    """What `MlflowClient.list_artifacts` asks when a run's artifact URI is not a proxy URI;
    answered from the same store."""
    with uow() as session:
        run = runs.load(
            session,
            caller,
            text(fields, "run_id") or text(fields, "run_uuid", required=True),
            Role.viewer,
        )
        root = ids.run_artifact_path(run.experiment_id, run.id)
        relative = text(fields, "path").strip("/")
        path = location.authorize(session, caller, f"{root}/{relative}", Role.viewer)
    return {"root_uri": ids.artifact_uri(root), "files": location.list(path)}
