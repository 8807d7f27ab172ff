"""What the local executor tells the control plane about this machine, as the operator does
about a cluster: one node (this host, its GPUs, how many are in use) and each running
attempt's process group, so the dashboard's cluster page and run pages read the same way on
both backends."""

import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from crucible.client import CrucibleClient
from crucible.schemas.cluster import ClusterReport, NodeReport, PodReport

CLUSTER_NAME = "local"
HEARTBEAT_SECONDS = 60.0


@dataclass(frozen=True)
class ProcessGroup:
    run_id: int
    attempt: int
    pid: int
    gpus: tuple[int, ...]
    stopping: bool  # SIGTERM sent (a preemption or shutdown), not exited yet


def build_report(host: str, gpus_total: int, groups: Iterable[ProcessGroup]) -> ClusterReport:
    groups = sorted(groups, key=lambda g: (g.run_id, g.attempt))
    return ClusterReport(
        nodes=[
            NodeReport(
                name=host,
                ready=True,
                gpus_allocatable=gpus_total,
                gpus_allocated=sum(len(g.gpus) for g in groups),
            )
        ],
        pods=[
            PodReport(
                run_id=g.run_id,
                attempt=g.attempt,
                name=f"run-{g.run_id}-attempt-{g.attempt}",
                phase="Terminating" if g.stopping else "Running",
                node=host,
                gpus=len(g.gpus),
                gpu_devices=",".join(map(str, g.gpus)),
                pid=g.pid,
            )
            for g in groups
        ],
    )


class Reporter:
    """Sends a report when it differs from the last one sent, or once a minute."""

    def __init__(self, client: CrucibleClient) -> None:
        self._client = client
        self._host = socket.gethostname()[:253] or "localhost"
        self._last: ClusterReport | None = None
        self._sent_at = 0.0

    def maybe_report(self, gpus_total: int, groups: Iterable[ProcessGroup]) -> None:
        report = build_report(self._host, gpus_total, groups)
        now = time.monotonic()
        if report == self._last and now - self._sent_at < HEARTBEAT_SECONDS:
            return
        self._client.report_cluster(CLUSTER_NAME, report)
        self._last, self._sent_at = report, now
