"""What a ServedModel's Deployment says about it: phase, ready pods, and the checkpoint
every ready pod serves. A pure function of the Deployment as read, unit-tested without a
cluster."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crucible_operator.served_pods import ANNOTATION_CHECKPOINT

PENDING, ROLLING, READY, FAILED = "Pending", "Rolling", "Ready", "Failed"


@dataclass(frozen=True)
class Observed:
    phase: str
    replicas: int
    ready_replicas: int
    serving: int | None  # the checkpoint every ready pod serves; None while none is ready
    message: str


def observe(
    deployment: Mapping[str, Any] | None, replicas: int, served_before: int | None
) -> Observed:
    """`served_before` is what the status said was served: during a roll the ready pods are
    a mix, and the old checkpoint is still the one every client may get."""
    if deployment is None:
        return Observed(PENDING, replicas, 0, None, "the Deployment is not created yet")
    meta = deployment.get("metadata") or {}
    status = deployment.get("status") or {}
    template = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    newest = int(template[ANNOTATION_CHECKPOINT]) if ANNOTATION_CHECKPOINT in template else None
    ready = int(status.get("readyReplicas") or 0)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == (
            "ProgressDeadlineExceeded"
        ):
            return Observed(
                FAILED,
                replicas,
                ready,
                served_before if ready else None,
                f"the pods did not become ready: {condition.get('message', '')}".strip(),
            )
    seen = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    settled = (
        seen
        and int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("replicas") or 0) == replicas  # no old pod left
        and ready == replicas
        and int(status.get("availableReplicas") or 0) == replicas
    )
    if settled:
        return Observed(READY, replicas, ready, newest if replicas else None, "")
    if ready == 0:
        return Observed(PENDING, replicas, 0, None, "no serving pod is ready yet")
    if served_before is None or served_before == newest:
        # Scaling, or a first start some pods of which are ready: one checkpoint throughout.
        return Observed(ROLLING, replicas, ready, newest, f"{ready} of {replicas} pods ready")
    return Observed(
        ROLLING,
        replicas,
        ready,
        served_before,
        f"rolling from checkpoint {served_before} to {newest}: {ready} of {replicas} pods ready",
    )
