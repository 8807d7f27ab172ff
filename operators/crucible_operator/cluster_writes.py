"""What a reconcile pass writes to Kubernetes: pods created, ungated and stopped, and the
resource's status. Each write is idempotent, so a pass cut short is simply done again:
a pod that exists already (409) or is gone already (404) is what the write wanted."""

from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import ApiError as KubeError
from lightkube import codecs
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from crucible_operator.context import RESOURCES
from crucible_operator.facts import NodeFacts, PodFacts
from crucible_operator.kube import BoundedKube


async def create(kube: BoundedKube, obj: dict[str, Any]) -> bool:
    """Whether this call created it (False: an earlier pass, or operator, did)."""
    try:
        await kube.create(codecs.from_dict(obj))
    except KubeError as exc:
        if exc.status.code == 409:
            return False
        raise
    return True


async def lift_gate(kube: BoundedKube, pod: PodFacts) -> None:
    await kube.patch(
        Pod,
        pod.name,
        {"spec": {"schedulingGates": []}},
        namespace=pod.namespace,
        patch_type=PatchType.MERGE,
    )


async def stop(
    kube: BoundedKube, victims: Iterable[PodFacts], nodes: Mapping[str, NodeFacts]
) -> None:
    """Delete the pods still running, with their grace period to checkpoint, or none where
    the node is lost (its kubelet is gone and cannot confirm a graceful stop)."""
    for pod in victims:
        if pod.terminal or pod.deleting:
            continue
        grace = None if node_ok(nodes, pod.node) else 0
        try:
            await kube.delete(Pod, pod.name, namespace=pod.namespace, grace_period=grace)
        except KubeError as exc:
            if exc.status.code != 404:
                raise


def node_ok(nodes: Mapping[str, NodeFacts], name: str | None) -> bool:
    """Not bound yet, or bound to a node that is there and Ready."""
    if name is None:
        return True
    node = nodes.get(name)
    return node is not None and node.ready


async def patch_status(
    kube: BoundedKube, kind: str, meta: Mapping[str, Any], status: Mapping[str, Any]
) -> None:
    try:
        await kube.patch(
            RESOURCES[kind].Status,
            meta["name"],
            {"status": dict(status)},
            namespace=meta["namespace"],
            patch_type=PatchType.MERGE,
        )
    except KubeError as exc:
        if exc.status.code != 404:  # deleted meanwhile: nothing to write to
            raise
