"""What the operator builds once at startup and every handler shares (kept in kopf's memo):
the control-plane client, the Kubernetes client, pod options, and small caches."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from lightkube.generic_resource import GenericNamespacedResource, create_namespaced_resource

from crucible.client import CrucibleClient
from crucible_operator import naming
from crucible_operator.feed import RunChanges
from crucible_operator.gang import Eligibility
from crucible_operator.kube import BoundedKube
from crucible_operator.metrics import OperatorMetrics
from crucible_operator.pods import PodOptions
from crucible_operator.reservations import Reservations

P = ParamSpec("P")
T = TypeVar("T")

RESOURCES: dict[str, type[GenericNamespacedResource]] = {
    k.kind: create_namespaced_resource(naming.GROUP, naming.VERSION, k.kind, k.plural)
    for k in naming.KINDS
}


@dataclass
class OperatorContext:
    api: CrucibleClient  # synchronous; called through `call` on a thread
    kube: BoundedKube
    options: PodOptions
    metrics: OperatorMetrics
    projects: dict[str, str] = field(default_factory=dict)  # namespace -> project name
    token_secrets: set[str] = field(default_factory=set)  # namespaces whose Secret exists
    wakeups: dict[str, asyncio.Event] = field(default_factory=dict)  # run uid -> its loop
    reservations: Reservations = field(default_factory=Reservations)
    eligibility: Eligibility = field(default_factory=Eligibility)
    node_ready: dict[str, bool] = field(default_factory=dict)
    # run uid -> the generation its loop was last woken for
    seen_versions: dict[str, int] = field(default_factory=dict)
    changes: RunChanges = field(default_factory=RunChanges)  # told by the event feed

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A control-plane call, off the event loop (the client is synchronous)."""
        self.metrics.control_plane_calls.labels(getattr(fn, "__name__", "call")).inc()
        return await asyncio.to_thread(fn, *args, **kwargs)

    def wake(self, uid: str) -> None:
        event = self.wakeups.get(uid)
        if event is not None:
            event.set()


def memo_context(memo: Any) -> OperatorContext:
    context: OperatorContext = memo.context
    return context
