"""Sweeps: submitted whole, listed, shown with their trials, cancelled. The workers start
and stop the trials (`core/sweep_controller.py`)."""

from fastapi import APIRouter

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import Limit, PathId
from crucible.core import sweeps
from crucible.core.storage_check import layout_of, require_usable_storage
from crucible.domain.specs import TrainingRunManifest
from crucible.schemas.sweeps import SweepPublic, SweepsPublic, SweepSubmit

router = APIRouter(prefix="/api/v1", tags=["sweeps"])


@router.post("/sweeps", status_code=201, operation_id="submitSweep")
def submit_sweep(
    body: SweepSubmit, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> SweepPublic:
    """Create a sweep; its trials start within seconds, as the workers' controller looks.
    The same submission again returns the sweep; the same name with another spec is a 409.
    Every trial's config is checked first, a bad path or value named (422)."""
    with uow() as session:
        sweep = sweeps.submit_sweep(session=session, principal=principal, sweep_in=body)
        trial = TrainingRunManifest(
            kind="TrainingRun", metadata=body.manifest.metadata, spec=body.manifest.spec.run
        )
        require_usable_storage(
            session, layout_of(settings), project_id=sweep.project_id, manifest=trial
        )
        return sweep


@router.get("/sweeps", operation_id="listSweeps")
def list_sweeps(
    uow: Uow,
    principal: CurrentPrincipal,
    project: str | None = None,
    cursor: str | None = None,
    limit: Limit = 50,
) -> SweepsPublic:
    """The sweeps the caller may see, newest first (without their trials)."""
    with uow() as session:
        return sweeps.list_sweeps(
            session=session, principal=principal, project=project, cursor=cursor, limit=limit
        )


@router.get("/sweeps/{sweep_id}", operation_id="getSweep")
def get_sweep(sweep_id: PathId, uow: Uow, principal: CurrentPrincipal) -> SweepPublic:
    """The sweep with every trial started: its run, phase, point, the metric's last value,
    and why the sweep stopped it, if it did."""
    with uow() as session:
        return sweeps.get_sweep(session=session, principal=principal, sweep_id=sweep_id)


@router.post("/sweeps/{sweep_id}/cancel", operation_id="cancelSweep")
def cancel_sweep(sweep_id: PathId, uow: Uow, principal: CurrentPrincipal) -> SweepPublic:
    """End the sweep: no more trials, and its running trials cancelled."""
    with uow() as session:
        return sweeps.cancel_sweep(session=session, principal=principal, sweep_id=sweep_id)
