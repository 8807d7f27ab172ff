"""A manifest checked as its submission would be, with nothing written."""

from fastapi import APIRouter

from crucible.api.deps import CurrentPrincipal, Uow
from crucible.core import manifests
from crucible.schemas.manifests import ManifestCheck, ManifestValidation

router = APIRouter(prefix="/api/v1", tags=["manifests"])


@router.post("/manifests/validate", operation_id="validateManifest")
def validate_manifest(
    body: ManifestCheck, uow: Uow, principal: CurrentPrincipal
) -> ManifestValidation:
    """Every problem `POST /runs` (TrainingRun, RolloutJob, EvalJob) or `POST /sweeps`
    (Sweep, every trial's config included) would refuse the manifest for, each at its path.
    A viewer may ask; nothing is written."""
    with uow() as session:
        return manifests.validate_manifest(session=session, principal=principal, check=body)
