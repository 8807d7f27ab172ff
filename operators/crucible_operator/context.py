"""What the operator builds once at startup and every handler shares (kept in kopf's memo):
the clients, pod options, metrics, and the state shared between handlers, one object per
concern: the cluster's capacity (gang.py), what the event feed told (feed.py), the reconcile
loops to wake (below), and the namespaces set up for runs (registration.py)."""

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf
from lightkube.generic_resource import GenericNamespacedResource, create_namespaced_resource

from crucible.client.async_http import AsyncCrucibleClient
from crucible.client.calls import Call
from crucible_operator import naming
from crucible_operator.feed import RunChanges
from crucible_operator.gang import Capacity
from crucible_operator.kube import BoundedKube
from crucible_operator.metrics import OperatorMetrics
from crucible_operator.pods import PodOptions

T = TypeVar("T")

RESOURCES: dict[str, type[GenericNamespacedResource]] = {
    kind: create_namespaced_resource(naming.GROUP, naming.VERSION, kind, plural)
    for kind, plural in [(k.kind, k.plural) for k in naming.KINDS]
    + [
        (naming.SERVED_MODEL_KIND, naming.SERVED_MODEL_PLURAL),
        (naming.SWEEP_KIND, naming.SWEEP_PLURAL),
    ]
}


class Loops:
    """The reconcile loops running, by their resource's uid: what wakes each one."""

    def __init__(self) -> None:
        self._wakeups: dict[str, asyncio.Event] = {}
        self._generations: dict[str, int] = {}  # the generation each was last woken for

    def start(self, uid: str) -> asyncio.Event:
        return self._wakeups.setdefault(uid, asyncio.Event())

    def end(self, uid: str) -> None:
        self._wakeups.pop(uid, None)
        self._generations.pop(uid, None)

    def __contains__(self, uid: object) -> bool:
        return uid in self._wakeups

    def wake(self, uid: str) -> None:
        event = self._wakeups.get(uid)
        if event is not None:
            event.set()

    def wake_on_generation(self, uid: str, generation: int) -> None:
        """Wake a loop for a new spec, not for its own status writes (which come back as
        events too: waking on those doubled the passes)."""
        if self._generations.get(uid) != generation:
            self._generations[uid] = generation
            self.wake(uid)


@dataclass
class Namespaces:
    """What registration learnt or made per namespace."""

    projects: dict[str, str] = field(default_factory=dict)  # namespace -> project name
    token_secrets: set[str] = field(default_factory=set)  # namespaces whose Secret exists


@dataclass
class OperatorContext:
    api: AsyncCrucibleClient
    kube: BoundedKube
    options: PodOptions
    metrics: OperatorMetrics
    capacity: Capacity = field(default_factory=Capacity)
    changes: RunChanges = field(default_factory=RunChanges)
    loops: Loops = field(default_factory=Loops)
    namespaces: Namespaces = field(default_factory=Namespaces)

    async def call(self, call: Call[T]) -> T:
        """A control-plane call, counted by its name."""
        self.metrics.control_plane_calls.labels(call.name).inc()
        return await self.api.send(call)


def memo_context(memo: Any) -> OperatorContext:
    context: OperatorContext = memo.context
    return context


# After a wake-up, wait this long for the burst it belongs to (a pod is created, ungated,
# bound and started within a few hundred milliseconds): one pass then sees all of it.
COALESCE_SECONDS = 0.05


async def sleep_until_woken(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
    """Up to `delay` seconds, less when woken or asked to stop."""
    deadline = time.monotonic() + delay
    while not stopped and not wake.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        try:
            await asyncio.wait_for(wake.wait(), timeout=min(remaining, 1.0))
        except TimeoutError:
            continue
    if wake.is_set():
        await asyncio.sleep(COALESCE_SECONDS)
