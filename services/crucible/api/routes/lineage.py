"""Datasets, run inputs, checkpoints, eval results and lineage graph walks.

Fixed paths (`/datasets/versions/...`, `/datasets/resolve`, `/checkpoints/best|latest`) are
declared before the parametrised ones next to them, so a path parameter never captures them.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from crucible.api.deps import CurrentPrincipal, SettingsDep, Uow
from crucible.api.params import Limit, PathId
from crucible.core import checkpoints, datasets, evals, lineage
from crucible.core.checkpoints import BestMode
from crucible.core.storage_check import layout_of, require_checkpoint_uri, require_project_uri
from crucible.domain.enums import LineageDirection, NodeType
from crucible.domain.storage_uris import require_usable_uri
from crucible.schemas.common import Page
from crucible.schemas.lineage import (
    METRIC_PATTERN,
    BestCheckpointPublic,
    CheckpointCreate,
    CheckpointPublic,
    DatasetPublic,
    DatasetVersionCreate,
    DatasetVersionPublic,
    EvalResultCreate,
    EvalResultPublic,
    LineageGraph,
    RunInputCreate,
    RunInputPublic,
)

router = APIRouter(prefix="/api/v1")


# --- datasets -------------------------------------------------------------------------------


@router.post(
    "/datasets/versions", status_code=201, operation_id="registerDatasetVersion", tags=["datasets"]
)
def register_dataset_version(
    body: DatasetVersionCreate, uow: Uow, principal: CurrentPrincipal, settings: SettingsDep
) -> DatasetVersionPublic:
    """Register a dataset version (the dataset is created on first use). The same digest
    again returns the existing version. Its URI must lie in the project's storage or in shared
    storage under a root (file:// or s3:// only)."""
    require_usable_uri(body.uri)
    with uow() as session:
        version = datasets.register_version(session=session, principal=principal, version_in=body)
        # After the access check, before the commit: a refusal registers nothing.
        require_project_uri(
            session,
            layout_of(settings),
            project_id=version.project_id,
            uri=body.uri,
            shared_ok=True,
        )
        return version


@router.get("/datasets/versions/{version_id}", operation_id="getDatasetVersion", tags=["datasets"])
def get_dataset_version(
    version_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> DatasetVersionPublic:
    with uow() as session:
        return datasets.get_version(session=session, principal=principal, version_id=version_id)


@router.get("/datasets/resolve", operation_id="resolveDataset", tags=["datasets"])
def resolve_dataset(
    project: str,
    ref: Annotated[str, Query(description="`name@<version>` or `name@latest`.")],
    uow: Uow,
    principal: CurrentPrincipal,
) -> DatasetVersionPublic:
    with uow() as session:
        return datasets.resolve(session=session, principal=principal, project=project, ref=ref)


@router.get("/datasets", operation_id="listDatasets", tags=["datasets"])
def list_datasets(
    project: str,
    uow: Uow,
    principal: CurrentPrincipal,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[DatasetPublic]:
    with uow() as session:
        return datasets.list_datasets(
            session=session, principal=principal, project=project, cursor=cursor, limit=limit
        )


@router.get(
    "/datasets/{dataset_id}/versions", operation_id="listDatasetVersions", tags=["datasets"]
)
def list_dataset_versions(
    dataset_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    descending: bool = True,
    cursor: str | None = None,
    limit: Limit = 50,
) -> Page[DatasetVersionPublic]:
    with uow() as session:
        return datasets.list_versions(
            session=session,
            principal=principal,
            dataset_id=dataset_id,
            descending=descending,
            cursor=cursor,
            limit=limit,
        )


# --- run inputs -----------------------------------------------------------------------------


@router.post("/runs/{run_id}/inputs", status_code=201, operation_id="linkRunInput", tags=["runs"])
def link_run_input(
    run_id: PathId, body: RunInputCreate, uow: Uow, principal: CurrentPrincipal
) -> RunInputPublic:
    """Record that the run reads a dataset version or starts from a checkpoint (idempotent)."""
    with uow() as session:
        return lineage.link_input(
            session=session, principal=principal, run_id=run_id, input_in=body
        )


@router.get("/runs/{run_id}/inputs", operation_id="listRunInputs", tags=["runs"])
def list_run_inputs(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> list[RunInputPublic]:
    with uow() as session:
        return lineage.list_inputs(session=session, principal=principal, run_id=run_id)


# --- checkpoints ----------------------------------------------------------------------------


@router.post(
    "/runs/{run_id}/checkpoints",
    status_code=201,
    operation_id="registerCheckpoint",
    tags=["checkpoints"],
)
def register_checkpoint(
    run_id: PathId,
    body: CheckpointCreate,
    uow: Uow,
    principal: CurrentPrincipal,
    settings: SettingsDep,
) -> CheckpointPublic:
    """Register a checkpoint the run wrote. The same step and digest again returns it; the
    same step with another digest is a 409. Its URI must lie in the project's storage (its
    prefix, or the folder the platform gave one of its runs): retention deletes it."""
    require_usable_uri(body.uri)
    with uow() as session:
        checkpoint = checkpoints.register_checkpoint(
            session=session, principal=principal, run_id=run_id, checkpoint_in=body
        )
        require_checkpoint_uri(session, layout_of(settings), run_id=run_id, uri=body.uri)
        return checkpoint


@router.get(
    "/runs/{run_id}/checkpoints/best", operation_id="getBestCheckpoint", tags=["checkpoints"]
)
def get_best_checkpoint(
    run_id: PathId,
    metric: Annotated[str, Query(min_length=1, max_length=200, pattern=METRIC_PATTERN)],
    uow: Uow,
    principal: CurrentPrincipal,
    mode: BestMode = BestMode.max,
) -> BestCheckpointPublic:
    """The live checkpoint with the highest (`mode=max`) or lowest eval score on `metric`."""
    with uow() as session:
        return checkpoints.best_checkpoint(
            session=session, principal=principal, run_id=run_id, metric=metric, mode=mode
        )


@router.get(
    "/runs/{run_id}/checkpoints/latest", operation_id="getLatestCheckpoint", tags=["checkpoints"]
)
def get_latest_checkpoint(
    run_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> CheckpointPublic:
    with uow() as session:
        return checkpoints.latest_checkpoint(session=session, principal=principal, run_id=run_id)


@router.get("/runs/{run_id}/checkpoints", operation_id="listCheckpoints", tags=["checkpoints"])
def list_checkpoints(
    run_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    descending: bool = False,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[CheckpointPublic]:
    """The run's checkpoints by step (ascending unless `descending`)."""
    with uow() as session:
        return checkpoints.list_checkpoints(
            session=session,
            principal=principal,
            run_id=run_id,
            descending=descending,
            cursor=cursor,
            limit=limit,
        )


@router.get("/checkpoints/{checkpoint_id}", operation_id="getCheckpoint", tags=["checkpoints"])
def get_checkpoint(
    checkpoint_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> CheckpointPublic:
    with uow() as session:
        return checkpoints.get_checkpoint(
            session=session, principal=principal, checkpoint_id=checkpoint_id
        )


# --- evals ----------------------------------------------------------------------------------


@router.post("/evals", status_code=201, operation_id="recordEvalResult", tags=["evals"])
def record_eval_result(
    body: EvalResultCreate, uow: Uow, principal: CurrentPrincipal
) -> EvalResultPublic:
    """Record a suite's scores for a checkpoint. The same checkpoint, suite and eval run with
    the same scores again returns the recorded result; other scores are a 409."""
    with uow() as session:
        return evals.record_result(session=session, principal=principal, result_in=body)


@router.get(
    "/checkpoints/{checkpoint_id}/evals", operation_id="listCheckpointEvals", tags=["evals"]
)
def list_checkpoint_evals(
    checkpoint_id: PathId, uow: Uow, principal: CurrentPrincipal
) -> list[EvalResultPublic]:
    with uow() as session:
        return evals.list_for_checkpoint(
            session=session, principal=principal, checkpoint_id=checkpoint_id
        )


@router.get("/runs/{run_id}/evals", operation_id="listRunEvals", tags=["evals"])
def list_run_evals(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> list[EvalResultPublic]:
    """Eval results of every checkpoint the run wrote, in step order."""
    with uow() as session:
        return evals.list_for_run(session=session, principal=principal, run_id=run_id)


# --- lineage --------------------------------------------------------------------------------


@router.get("/lineage/{entity}/{entity_id}", operation_id="getLineage", tags=["lineage"])
def get_lineage(
    entity: Annotated[NodeType, Path(description="The kind of node to start from.")],
    entity_id: PathId,
    uow: Uow,
    principal: CurrentPrincipal,
    direction: LineageDirection = LineageDirection.both,
    depth: Annotated[int, Query(ge=1, le=lineage.MAX_DEPTH)] = 5,
) -> LineageGraph:
    """Nodes and edges within `depth` hops: upstream (what it was made from), downstream
    (what was made from it) or both. `truncated` is set past 5,000 nodes."""
    with uow() as session:
        return lineage.graph(
            session=session,
            principal=principal,
            node_type=entity,
            node_id=entity_id,
            direction=direction,
            depth=depth,
        )
