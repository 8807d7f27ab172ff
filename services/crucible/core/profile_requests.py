"""Profiles asked of a running run (`POST /runs/{id}/profile`), and how the run's heartbeats
carry them to the workload and their progress back (domain/profile_requests.py).

Only the built-in train job answers them: its trainer takes the request at a step boundary
(training/train.py). Any other workload would leave the request pending for ever, so the
request is refused up front, saying why.
"""

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lookups import get_or_404
from crucible.db.tables import Run, RunProfileRequest
from crucible.domain.contract import reference_workload
from crucible.domain.enums import Phase, Role, RunKind
from crucible.domain.errors import Conflict, NotFound
from crucible.domain.profile_requests import ProfileRequestState
from crucible.schemas.profiles import ProfileProgress, ProfileRequestPublic

TRAIN_JOB = "crucible.jobs.train"
"""The workload whose trainer takes profile requests (`reference_workload`)."""

OPEN_STATES = (ProfileRequestState.pending.value, ProfileRequestState.started.value)


def request_profile(
    *, session: Session, principal: Principal, run_id: int, steps: int
) -> ProfileRequestPublic:
    # Not core.runs.load_run: core.runs answers heartbeats with this module's help.
    run = get_or_404(session, Run, run_id, "run")
    principal.require(run.project_id, Role.editor, entity="run", key=run_id)
    # Two requests at once for one run both find none open unless they queue on its row
    # (Postgres; SQLite writes one transaction at a time anyway).
    session.execute(select(Run.id).where(Run.id == run.id).with_for_update())
    refusal = _why_not_profiled(run)
    if refusal is not None:
        raise Conflict(f"run {run.id} cannot be profiled now: {refusal}")
    open_request = _open_request(session, run.id)
    if open_request is not None:
        raise Conflict(
            f"run {run.id} cannot be profiled now: its profile request {open_request.id} is "
            f"still {_describe(open_request)}; wait for it (crucible runs profile {run.id} "
            "--wait shows its profile once written)"
        )
    request = RunProfileRequest(run_id=run.id, steps=steps, state=ProfileRequestState.pending.value)
    session.add(request)
    session.flush()
    return ProfileRequestPublic.model_validate(request)


def list_requests(session: Session, run_id: int) -> list[ProfileRequestPublic]:
    """The run's requests, newest first (the caller has checked access to the run)."""
    rows = session.scalars(
        select(RunProfileRequest)
        .where(RunProfileRequest.run_id == run_id)
        .order_by(RunProfileRequest.id.desc())
    )
    return [ProfileRequestPublic.model_validate(row) for row in rows]


def record_progress(session: Session, run_id: int, progress: ProfileProgress) -> None:
    """Apply what the run's SDK reports. Reports may repeat (a heartbeat retried) and a new
    attempt may start a request again on other steps; a done request stays done."""
    request = session.get(RunProfileRequest, progress.request_id)
    if request is None or request.run_id != run_id:
        raise NotFound("profile request", progress.request_id)
    if request.state == ProfileRequestState.done.value:
        return
    request.state = progress.state.value
    request.first_step, request.last_step = progress.first_step, progress.last_step
    session.flush()


def request_to_record(session: Session, run_id: int) -> ProfileRequestPublic | None:
    """What a heartbeat answers: the run's open request, if any. A `started` one too, since
    the attempt that started it may have ended before writing its files; the SDK of the
    attempt recording it knows it already."""
    request = _open_request(session, run_id)
    return None if request is None else ProfileRequestPublic.model_validate(request)


def _open_request(session: Session, run_id: int) -> RunProfileRequest | None:
    return session.scalar(
        select(RunProfileRequest)
        .where(RunProfileRequest.run_id == run_id, RunProfileRequest.state.in_(OPEN_STATES))
        .order_by(RunProfileRequest.id.desc())
        .limit(1)
    )


def _why_not_profiled(run: Run) -> str | None:
    if Phase(run.phase) is not Phase.Running:
        return f"it is {run.phase}, and only a Running run records steps"
    kind = run.manifest.get("kind", run.kind)
    if run.kind != RunKind.train.value:
        return f"{kind}s run no training steps; only a TrainingRun can be profiled"
    spec = run.manifest.get("spec") or {}
    if spec.get("command"):
        return (
            "it runs its own command (spec.command), and only the built-in train job (a "
            "TrainingRun without a command) takes profile requests; profile your own loop "
            "with torch.profiler"
        )
    if reference_workload(run.kind, spec) != TRAIN_JOB:
        return (
            "it is online RL (config.online), whose rounds do not go through the trainer "
            "that takes profile requests"
        )
    return None


def _describe(request: RunProfileRequest) -> str:
    if request.state == ProfileRequestState.started.value:
        return f"recording steps {request.first_step}-{request.last_step}"
    return f"pending ({request.steps} steps, not started yet)"
