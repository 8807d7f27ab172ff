"""The machines behind the runs: what the operator (or the local executor) reports about
nodes and pods, and the views the dashboard reads back.

A report replaces the backend's previous one in a single transaction, so readers always see
one report whole. Nodes are shared by every project and show only capacity; pods are shown
only through their run, so a token sees the pods of the runs it may see and no others.
"""

from collections.abc import Iterator
from datetime import datetime
from typing import TypeVar

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.runs import load_run
from crucible.db.tables import Attempt, ClusterNode, Run, RunPod
from crucible.db.types import utcnow
from crucible.domain.enums import Phase, Role
from crucible.schemas.cluster import (
    ClusterPublic,
    ClusterReport,
    ClusterView,
    NodePublic,
    ReportReceived,
    RunPodPublic,
    WaitingRun,
)

# Runs that want devices and have none yet: not started, waiting for capacity, for their
# inputs, or for their next attempt.
WAITING_PHASES = (
    Phase.Pending,
    Phase.WaitingForInputs,
    Phase.Scheduling,
    Phase.Interrupted,
    Phase.Recovering,
)
MAX_WAITING = 500
# Keeps each IN (...) under SQLite's bound-parameter limit.
_CHUNK = 5_000

T = TypeVar("T")


def record_report(
    *, session: Session, principal: Principal, cluster: str, report: ClusterReport
) -> ReportReceived:
    principal.require_global_admin()
    now = utcnow()
    run_ids = _resolve_runs(session, report)
    session.execute(delete(RunPod).where(RunPod.cluster == cluster))
    session.execute(delete(ClusterNode).where(ClusterNode.cluster == cluster))
    if report.nodes:
        session.execute(
            insert(ClusterNode),
            [
                {**node.model_dump(), "cluster": cluster, "reported_at": now}
                for node in report.nodes
            ],
        )
    _record_images(session, report, run_ids)
    pods = [
        {
            **pod.model_dump(exclude={"run_id", "run_uid", "image", "image_id"}),
            "run_id": run_ids[i],
            "cluster": cluster,
            "reported_at": now,
        }
        for i, pod in enumerate(report.pods)
        if run_ids[i] is not None
    ]
    if pods:
        session.execute(insert(RunPod), pods)
    return ReportReceived(
        cluster=cluster,
        nodes=len(report.nodes),
        pods=len(pods),
        unknown_runs=len(report.pods) - len(pods),
    )


def _record_images(session: Session, report: ClusterReport, run_ids: list[int | None]) -> None:
    """Keep on each attempt the image digest its first pod ran: pods go, and a tag can move,
    but what ran is part of the run's provenance. Set once, by the first report showing it."""
    seen: dict[tuple[int, int], tuple[str | None, str]] = {}
    for run_id, pod in zip(run_ids, report.pods, strict=True):
        if run_id is not None and pod.image_id and pod.rank == 0:
            seen.setdefault((run_id, pod.attempt), (pod.image, pod.image_id))
    if not seen:
        return
    for chunk in _chunks(sorted({run_id for run_id, _ in seen})):
        unset = session.scalars(
            select(Attempt).where(Attempt.run_id.in_(chunk), Attempt.image_id.is_(None))
        )
        for attempt in unset:
            if (found := seen.get((attempt.run_id, attempt.number))) is not None:
                attempt.image, attempt.image_id = found
    session.flush()


def _resolve_runs(session: Session, report: ClusterReport) -> list[int | None]:
    """Each pod's run id, or None where its run is not registered (yet)."""
    uids = {pod.run_uid for pod in report.pods if pod.run_id is None and pod.run_uid}
    by_uid: dict[str, int] = {}
    for chunk in _chunks(sorted(uids)):
        by_uid.update(
            (uid, run_id)
            for run_id, uid in session.execute(
                select(Run.id, Run.k8s_uid).where(Run.k8s_uid.in_(chunk))
            )
            if uid is not None
        )
    ids = {pod.run_id for pod in report.pods if pod.run_id is not None}
    existing: set[int] = set()
    for id_chunk in _chunks(sorted(ids)):
        existing.update(session.scalars(select(Run.id).where(Run.id.in_(id_chunk))))
    return [
        (pod.run_id if pod.run_id in existing else None)
        if pod.run_id is not None
        else by_uid.get(pod.run_uid or "")
        for pod in report.pods
    ]


def _chunks(items: list[T]) -> Iterator[list[T]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def cluster_view(*, session: Session, principal: Principal) -> ClusterView:
    nodes_by_cluster: dict[str, list[ClusterNode]] = {}
    for node in session.scalars(
        select(ClusterNode).order_by(ClusterNode.cluster, ClusterNode.name)
    ):
        nodes_by_cluster.setdefault(node.cluster, []).append(node)
    waiting = select(Run).where(Run.phase.in_([p.value for p in WAITING_PHASES]))
    if principal.project_id is not None:
        waiting = waiting.where(Run.project_id == principal.project_id)
    return ClusterView(
        clusters=[_cluster(name, nodes) for name, nodes in nodes_by_cluster.items()],
        waiting=[
            WaitingRun.model_validate(run)
            for run in session.scalars(waiting.order_by(Run.created_at, Run.id).limit(MAX_WAITING))
        ],
    )


def _cluster(name: str, nodes: list[ClusterNode]) -> ClusterPublic:
    listed = [NodePublic.model_validate(node) for node in nodes]
    reported: list[datetime] = [node.reported_at for node in nodes]
    return ClusterPublic(
        name=name,
        reported_at=max(reported),
        nodes=listed,
        gpus_allocatable=sum(n.gpus_allocatable for n in listed),
        gpus_allocated=sum(n.gpus_allocated for n in listed),
    )


def run_pods(*, session: Session, principal: Principal, run_id: int) -> list[RunPodPublic]:
    load_run(session, principal, run_id, Role.viewer)
    return [
        RunPodPublic.model_validate(pod)
        for pod in session.scalars(
            select(RunPod).where(RunPod.run_id == run_id).order_by(RunPod.attempt, RunPod.rank)
        )
    ]
