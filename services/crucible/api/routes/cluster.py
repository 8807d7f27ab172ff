"""The machines behind the runs: backends report nodes and pods; the dashboard reads them."""

from typing import Annotated

from fastapi import APIRouter, Path

from crucible.api.deps import CurrentPrincipal, Uow
from crucible.api.params import PathId
from crucible.core import cluster
from crucible.schemas.cluster import ClusterReport, ClusterView, ReportReceived, RunPodPublic
from crucible.schemas.common import NAME_PATTERN

router = APIRouter(prefix="/api/v1", tags=["cluster"])

ClusterName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="The reporting backend: `kubernetes` for the operator, `local`.",
    ),
]


@router.put("/clusters/{cluster_name}/report", operation_id="reportCluster")
def report_cluster(
    cluster_name: ClusterName, report: ClusterReport, uow: Uow, principal: CurrentPrincipal
) -> ReportReceived:
    """Replace what this backend last reported (global admin tokens: the operator, the local
    executor). Pods whose run is not registered yet are left out and counted."""
    with uow() as session:
        return cluster.record_report(
            session=session, principal=principal, cluster=cluster_name, report=report
        )


@router.get("/cluster", operation_id="getCluster")
def get_cluster(uow: Uow, principal: CurrentPrincipal) -> ClusterView:
    """Nodes with their GPUs allocated, per reporting backend, and the runs waiting to run
    (only those the token may see)."""
    with uow() as session:
        return cluster.cluster_view(session=session, principal=principal)


@router.get("/runs/{run_id}/pods", operation_id="listRunPods")
def list_run_pods(run_id: PathId, uow: Uow, principal: CurrentPrincipal) -> list[RunPodPublic]:
    """The run's pods (Kubernetes) or process groups (local) as last reported, with their
    nodes and GPUs."""
    with uow() as session:
        return cluster.run_pods(session=session, principal=principal, run_id=run_id)
