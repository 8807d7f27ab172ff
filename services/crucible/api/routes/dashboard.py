"""Read-only views the dashboard needs that no other route gives in one call."""

from typing import Annotated

from fastapi import APIRouter, Query

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import PathId
from crucible.core import run_logs, run_summaries
from crucible.core.run_logs import MAX_TAIL_BYTES, LogTail
from crucible.core.run_summaries import MAX_RUNS, RunId, RunSummary
from crucible.domain.json_values import MAX_INT32

router = APIRouter(prefix="/api/v1", tags=["runs"])


@router.get("/run-summaries", operation_id="listRunSummaries")
def list_run_summaries(
    ids: Annotated[list[RunId], Query(min_length=1, max_length=MAX_RUNS, description="Run ids.")],
    uow: Uow,
    principal: CurrentPrincipal,
) -> list[RunSummary]:
    """Goodput and best eval score of each run (`?ids=1&ids=2`, up to 200), for the runs
    table; runs the token cannot see are left out."""
    with uow() as session:
        return run_summaries.run_summaries(session=session, principal=principal, run_ids=ids)


@router.get("/runs/{run_id}/log-tail", operation_id="getRunLogTail")
def get_run_log_tail(
    run_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    settings: SettingsDep,
    attempt: Annotated[
        int | None, Query(ge=1, le=MAX_INT32, description="Attempt number; default the latest.")
    ] = None,
    tail_bytes: Annotated[int, Query(ge=1, le=MAX_TAIL_BYTES)] = 64 * 1024,
) -> LogTail:
    """The end of an attempt's output (stdout and stderr) as the local executor wrote it;
    for a Kubernetes run, where to find its pods' logs instead."""
    with uow() as session:
        return run_logs.log_tail(
            session=session,
            principal=principal,
            home=settings.home,
            run_id=run_id,
            attempt=attempt,
            tail_bytes=tail_bytes,
        )
