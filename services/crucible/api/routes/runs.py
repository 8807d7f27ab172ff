from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sse_starlette.sse import EventSourceResponse

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import Limit, PathId, PathNumber, QueryId
from crucible.api.streaming import event_stream
from crucible.core import goodput, inputs, reproductions, runs
from crucible.core.storage_check import layout_of, require_usable_storage
from crucible.domain.enums import Phase, RunKind
from crucible.domain.json_values import MAX_INT64
from crucible.schemas.common import Moment, Page
from crucible.schemas.goodput import ExperimentGoodput, RunGoodput
from crucible.schemas.provenance import AttemptEnvironment
from crucible.schemas.runs import (
    AttemptEnd,
    AttemptHeartbeat,
    AttemptPublic,
    AttemptStart,
    EventFeed,
    HeartbeatAnswer,
    InputsResolution,
    PhaseReport,
    RunEventPublic,
    RunPublic,
    RunSubmit,
)

router = APIRouter(prefix="/api/v1", tags=["runs"])


@router.post("/runs", status_code=201, operation_id="submitRun")
def submit_run(
    body: RunSubmit, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> RunPublic:
    with uow() as session:
        run = runs.submit_run(session=session, principal=principal, run_in=body)
        # After the project's access check (a viewer learns nothing of buckets), before the
        # commit: a refusal rolls the whole submission back.
        require_usable_storage(
            session, layout_of(settings), project_id=run.project_id, manifest=body.manifest
        )
        return run


@router.get("/runs", operation_id="listRuns")
def list_runs(
    uow: Uow,
    principal: CurrentPrincipal,
    project: str | None = None,
    experiment_id: QueryId = None,
    kind: RunKind | None = None,
    phase: Phase | None = None,
    tag: Annotated[str | None, Query(description="`key=value`")] = None,
    created_after: Moment | None = None,
    created_before: Moment | None = None,
    sort: Annotated[str, Query(pattern="^(created_at|name|phase)$")] = "created_at",
    descending: bool = True,
    cursor: str | None = None,
    limit: Limit = 50,
) -> Page[RunPublic]:
    with uow() as session:
        return runs.list_runs(
            session=session,
            principal=principal,
            project=project,
            experiment_id=experiment_id,
            kind=kind,
            phase=phase,
            tag=tag,
            created_after=created_after,
            created_before=created_before,
            sort=sort,
            descending=descending,
            cursor=cursor,
            limit=limit,
        )


@router.get("/runs/{run_id}", operation_id="getRun")
def get_run(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> RunPublic:
    with uow() as session:
        return runs.get_run(session=session, principal=principal, run_id=run_id)


@router.post("/runs/{run_id}/cancel", operation_id="cancelRun")
def cancel_run(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> RunPublic:
    with uow() as session:
        return runs.cancel_run(session=session, principal=principal, run_id=run_id)


@router.post("/runs/{run_id}/preempt", operation_id="preemptRun")
def preempt_run(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> RunPublic:
    """Preempt a Running run like a node drain: SIGTERM, the workload checkpoints and exits."""
    with uow() as session:
        return runs.request_preemption(session=session, principal=principal, run_id=run_id)


@router.get(
    "/runs/{run_id}/reproduction",
    operation_id="getRunReproduction",
    response_model_exclude_none=True,
    responses={409: {"description": "The run cannot be reproduced; `detail` says why."}},
)
def get_run_reproduction(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> RunSubmit:
    """The body to POST to /runs that runs this run again exactly, as `crucible runs
    reproduce` builds it: inputs pinned to the versions it read, the image digest its pods
    ran (Kubernetes), or its code as it is now on this server's machine, where the local
    executor runs it, checked against what the run recorded. 409 saying why when it cannot."""
    with uow() as session:
        return reproductions.run_reproduction(session=session, principal=principal, run_id=run_id)


@router.get("/runs/{run_id}/goodput", operation_id="getRunGoodput")
def run_goodput(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> RunGoodput:
    """Per attempt: duration, work lost since the last checkpoint, restart overhead; and the
    run's goodput (productive over allocated device-seconds)."""
    with uow() as session:
        return goodput.run_goodput(session=session, principal=principal, run_id=run_id)


@router.get(
    "/experiments/{experiment_id}/goodput",
    operation_id="getExperimentGoodput",
    tags=["experiments"],
)
def experiment_goodput(
    experiment_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> ExperimentGoodput:
    with uow() as session:
        return goodput.experiment_goodput(
            session=session, principal=principal, experiment_id=experiment_id
        )


@router.post("/runs/{run_id}/inputs/resolve", operation_id="resolveRunInputs")
def resolve_inputs(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> InputsResolution:
    """Resolve the run's input datasets and starting checkpoint and pin them (the backend
    asks before the first attempt); a run whose inputs do not exist yet waits for them."""
    with uow() as session:
        return inputs.resolve_inputs(session=session, principal=principal, run_id=run_id)


@router.post("/runs/{run_id}/phase", operation_id="reportRunPhase")
def report_phase(
    run_id: PathId, body: PhaseReport, uow: Uow, principal: CurrentPrincipal
) -> RunPublic:
    with uow() as session:
        return runs.report_phase(session=session, principal=principal, run_id=run_id, report=body)


@router.get("/runs/{run_id}/attempts", operation_id="listAttempts")
def list_attempts(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> list[AttemptPublic]:
    with uow() as session:
        return runs.list_attempts(session=session, principal=principal, run_id=run_id)


@router.post("/runs/{run_id}/attempts", status_code=201, operation_id="startAttempt")
def start_attempt(
    run_id: PathId, body: AttemptStart, uow: Uow, principal: CurrentPrincipal
) -> AttemptPublic:
    with uow() as session:
        return runs.start_attempt(
            session=session, principal=principal, run_id=run_id, attempt_in=body
        )


@router.post("/runs/{run_id}/attempts/{number}/end", operation_id="endAttempt")
def end_attempt(
    run_id: PathId, number: PathNumber, body: AttemptEnd, uow: Uow, principal: CurrentPrincipal
) -> AttemptPublic:
    with uow() as session:
        return runs.end_attempt(
            session=session, principal=principal, run_id=run_id, number=number, attempt_in=body
        )


@router.put("/runs/{run_id}/attempts/{number}/environment", operation_id="reportEnvironment")
def report_environment(
    run_id: PathId,
    number: PathNumber,
    body: AttemptEnvironment,
    uow: Uow,
    principal: CurrentPrincipal,
) -> AttemptPublic:
    """What the attempt's workload runs on (package versions), reported when it starts."""
    with uow() as session:
        return runs.report_environment(
            session=session, principal=principal, run_id=run_id, number=number, environment=body
        )


@router.post("/runs/{run_id}/heartbeat", operation_id="heartbeat")
def heartbeat(
    run_id: PathId, body: AttemptHeartbeat, uow: Uow, principal: CurrentPrincipal
) -> HeartbeatAnswer:
    """The workload is alive: sets the attempt's `heartbeat_at` to now. It may carry how the
    run's live profile request stands (`profile`); the answer carries the request the run
    is to record (`profile_request`), so the workload needs no other call to hear of it."""
    with uow() as session:
        return runs.heartbeat(
            session=session, principal=principal, run_id=run_id, heartbeat_in=body
        )


@router.get("/runs/{run_id}/events", operation_id="listRunEvents")
def list_events(
    run_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> list[RunEventPublic]:
    with uow() as session:
        return runs.list_events(
            session=session, principal=principal, run_id=run_id, after_id=after_id, limit=limit
        )


@router.get("/events", operation_id="eventFeed")
def event_feed(
    uow: Uow,
    principal: CurrentPrincipal,
    after_id: Annotated[
        int | None, Query(ge=0, le=MAX_INT64, description="Omit to start from now (no items).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> EventFeed:
    """Timeline events of every run the caller may see, oldest first."""
    with uow() as session:
        return runs.event_feed(session=session, principal=principal, after_id=after_id, limit=limit)


@router.get(
    "/runs/{run_id}/events/stream",
    operation_id="streamRunEvents",
    response_class=EventSourceResponse,
)
def stream_run_events(
    run_id: PathId,
    request: Request,
    uow: Uow,
    principal: CurrentPrincipal,
    last_event_id: Annotated[int, Header(ge=0, le=MAX_INT64)] = 0,
) -> EventSourceResponse:
    """Server-Sent Events: every new timeline event of the run; resumes from Last-Event-ID."""
    with uow() as session:  # authorise (and 404) before the stream starts
        runs.get_run(session=session, principal=principal, run_id=run_id)

    def fetch(after_id: int) -> list[RunEventPublic]:
        with uow() as session:
            return runs.list_events(
                session=session, principal=principal, run_id=run_id, after_id=after_id
            )

    return EventSourceResponse(event_stream(request, fetch, last_event_id))


@router.get(
    "/experiments/{experiment_id}/events/stream",
    operation_id="streamExperimentEvents",
    response_class=EventSourceResponse,
    tags=["experiments"],
)
def stream_experiment_events(
    experiment_id: PathId,
    request: Request,
    uow: Uow,
    principal: CurrentPrincipal,
    last_event_id: Annotated[int, Header(ge=0, le=MAX_INT64)] = 0,
) -> EventSourceResponse:
    """Server-Sent Events: timeline events of every run in the experiment."""

    def fetch(after_id: int) -> list[RunEventPublic]:
        with uow() as session:
            return runs.list_experiment_events(
                session=session, principal=principal, experiment_id=experiment_id, after_id=after_id
            )

    fetch(0)  # authorise (and 404) before the stream starts
    return EventSourceResponse(event_stream(request, fetch, last_event_id))
