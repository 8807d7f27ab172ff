"""What the operator tells the control plane about the cluster: every node with its GPUs
allocatable and allocated, and every pod of a run, for the dashboard's cluster page and each
run's pods and GPUs.

Built from kopf's indexes, so it costs no Kubernetes reads; sent when it changed, and at
least every HEARTBEAT_SECONDS so the page can tell a quiet cluster from a silent operator.
One PUT per report whatever the number of runs, so it does not grow with the load.
"""

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from crucible.client import calls
from crucible.schemas.cluster import ClusterReport, NodeReport, PodReport
from crucible_operator.context import OperatorContext
from crucible_operator.facts import NodeFacts, PodFacts

log = logging.getLogger(__name__)

CLUSTER_NAME = "kubernetes"
REPORT_SECONDS = 5.0
HEARTBEAT_SECONDS = 60.0
# kopf fills its indexes from the first listing after start-up: an empty node index before
# then is "not listed yet", not "no nodes", so the first report waits for nodes or this long.
FIRST_REPORT_AFTER_SECONDS = 30.0
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery


def build_report(
    pods: Mapping[str, Iterable[PodFacts]],
    gpus_bound: Mapping[str, int],
    nodes: Iterable[NodeFacts],
) -> ClusterReport:
    node_reports = [
        NodeReport(
            name=facts.name,
            ready=facts.ready,
            schedulable=not facts.unschedulable,
            gpus_allocatable=facts.allocatable.gpus,
            gpus_allocated=gpus_bound.get(facts.name, 0),
            gpu_product=facts.labels.get(GPU_PRODUCT_LABEL, "")[:100],
        )
        for facts in nodes
    ]
    pod_reports = [
        PodReport(
            run_uid=uid,
            attempt=max(pod.attempt, 1),
            rank=pod.rank,
            name=pod.name,
            namespace=pod.namespace,
            phase=_shown_phase(pod),
            node=pod.node,
            gpus=pod.demand.gpus,
            image=pod.image,
            image_id=pod.image_id,
        )
        for uid, store in pods.items()
        for pod in store
    ]
    return ClusterReport(
        nodes=sorted(node_reports, key=lambda n: n.name),
        pods=sorted(pod_reports, key=lambda p: (p.namespace, p.name)),
    )


def _shown_phase(pod: PodFacts) -> str:
    """The phase as `kubectl get pods` would show it where that says more."""
    if pod.deleting and not pod.terminal:
        return "Terminating"
    if pod.gated:
        return "SchedulingGated"
    return pod.phase


async def report_forever(ctx: OperatorContext, pods: Mapping[str, Iterable[PodFacts]]) -> None:
    """Runs until cancelled (at the operator's clean-up). A failed report is retried at the
    next tick: the next report carries the whole picture anyway."""
    started = time.monotonic()
    last: Snapshot | None = None
    last_sent = 0.0
    while True:
        await asyncio.sleep(REPORT_SECONDS)
        now = time.monotonic()
        nodes = ctx.capacity.nodes
        if not nodes and now - started < FIRST_REPORT_AFTER_SECONDS:
            continue
        # Compared as the facts themselves: building the report's models is the costly part.
        snapshot = Snapshot(
            tuple(nodes.values()),
            dict(ctx.capacity.gpus_bound()),
            {uid: tuple(store) for uid, store in pods.items()},
        )
        if snapshot == last and now - last_sent < HEARTBEAT_SECONDS:
            continue
        report = build_report(snapshot.pods, snapshot.gpus_bound, snapshot.nodes)
        try:
            received = await ctx.call(calls.report_cluster(CLUSTER_NAME, report))
        except Exception as exc:  # the API restarting, a timeout: the next tick sends it all
            log.warning("cluster report failed, retrying in %.0f s: %s", REPORT_SECONDS, exc)
            continue
        last, last_sent = snapshot, now
        if received.unknown_runs:
            # Pods of runs not registered yet: resend next tick rather than in a minute.
            last = None


class Snapshot(NamedTuple):
    nodes: tuple[NodeFacts, ...]
    gpus_bound: dict[str, int]
    pods: dict[str, tuple[PodFacts, ...]]
