"""Read-only views the dashboard needs that no other route gives in one call."""

from typing import Annotated

from fastapi import APIRouter, Query

from crucible.api.deps import CurrentPrincipal, Uow
from crucible.core import run_summaries
from crucible.core.run_summaries import MAX_RUNS, RunId, RunSummary

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
