"""A run's profiles: the summaries of the steps `profile_from_step` or a live request
recorded, and their traces for a trace viewer; and the live request itself."""

import os
from collections.abc import Iterator
from typing import BinaryIO

from fastapi import APIRouter
from fastapi.responses import FileResponse, StreamingResponse

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import PathId
from crucible.core import profile_requests, run_profiles
from crucible.schemas.profiles import ProfileRequestCreate, ProfileRequestPublic, RunProfiles

router = APIRouter(prefix="/api/v1", tags=["runs"])

CHUNK_BYTES = 256 * 1024


@router.get("/runs/{run_id}/profiles", operation_id="listRunProfiles")
def list_run_profiles(
    run_id: PathId, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> RunProfiles:
    """Each rank's profile of the steps `config.train.profile_from_step` or a live request
    chose: its top kernels and how the steps' time split. For a Kubernetes run, where its
    profiles are. With them, the run's live requests and how each stands."""
    with uow() as session:
        return run_profiles.list_profiles(
            session=session, principal=principal, home=settings.home, run_id=run_id
        )


@router.post("/runs/{run_id}/profile", status_code=201, operation_id="requestRunProfile")
def request_run_profile(
    run_id: PathId, body: ProfileRequestCreate, uow: Uow, principal: CurrentPrincipal
) -> ProfileRequestPublic:
    """Record the next `steps` steps of a Running TrainingRun (the built-in train job) with
    the torch profiler. The run hears of it with its next heartbeat's answer and reports
    the steps it chose (`first_step`, `last_step`) and when the files are written (`done`);
    the profiles then appear in `GET /runs/{id}/profiles`. 409 when the run is not
    Running, cannot take requests, or has one open already."""
    with uow() as session:
        return profile_requests.request_profile(
            session=session, principal=principal, run_id=run_id, steps=body.steps
        )


@router.get(
    "/runs/{run_id}/profiles/{name}/trace",
    operation_id="getRunProfileTrace",
    response_class=FileResponse,
    responses={
        200: {
            "content": {"application/json": {}},
            "description": "The Chrome/Perfetto trace, sent gzipped (Content-Encoding: gzip).",
        }
    },
)
def get_run_profile_trace(
    run_id: PathId, name: str, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> StreamingResponse:
    """The trace of profile `name` (`rank<R>-steps<A>-<B>`), for Perfetto or chrome://tracing.
    Stored gzipped and sent as it is stored, with Content-Encoding: gzip, so a browser's
    fetch() hands over the JSON and `curl --compressed` writes it."""
    with uow() as session:
        trace = run_profiles.open_trace(
            session=session, principal=principal, home=settings.home, run_id=run_id, name=name
        )
    # Sent from the file opened, not reopened by name as FileResponse would: the run may
    # have put a link in its place since.
    return StreamingResponse(
        _chunks(trace),
        media_type="application/json",
        headers={
            "Content-Encoding": "gzip",
            "Content-Length": str(os.fstat(trace.fileno()).st_size),
            "Content-Disposition": f'inline; filename="{name}.trace.json"',
        },
    )


def _chunks(trace: BinaryIO) -> Iterator[bytes]:
    with trace:
        while chunk := trace.read(CHUNK_BYTES):
            yield chunk
