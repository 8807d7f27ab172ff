"""All pods of an attempt or none: does the whole gang fit on the cluster right now?

An attempt's pods are created with a scheduling gate (naming.GANG_GATE), so the scheduler
ignores them and they hold nothing. The operator lifts the gate from all of them at once,
and only when this check places every pod: a node must be Ready, schedulable, match the
run's nodeSelector, have every NoSchedule/NoExecute taint tolerated, and have the GPUs,
CPU and memory left after the pods already bound to it and the pods of gangs released
earlier but not yet bound (placed first, so two gangs released back to back do not both
count the same GPUs). The scheduler then binds them; when it cannot (something this check
does not model, such as affinity), its reason is surfaced on the run.

`fit` is the rule as a pure function. `Capacity` is what the operator keeps to apply it
at every gang check without walking the cluster: the nodes, what every pod takes (kept
current from pod and node events, handlers.py), the pods of gangs placed but not yet shown
ungated by those events (`Reservations`), and per gang shape its eligible nodes' free
capacity, kept sorted.
"""

import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crucible_operator.facts import Demand, NodeFacts, PodUse, Taint, demand_of

PodKey = tuple[str, str]  # (namespace, name)
# A node's free capacity, ordered tightest first: (GPUs, CPU, name, memory). Placing a pod
# is a binary search to the first node with enough GPUs, not a sort of every node.
Free = tuple[int, float, str, float]


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True)
class Gang:
    size: int
    demand: Demand
    node_selector: Mapping[str, str]
    tolerations: Sequence[Toleration]

    @classmethod
    def of(cls, size: int, pod_spec: Mapping[str, Any]) -> "Gang":
        """`size` pods like this one (every pod of an attempt asks for the same)."""
        return cls(
            size=size,
            demand=demand_of(pod_spec),
            node_selector=pod_spec.get("nodeSelector") or {},
            tolerations=[
                Toleration(
                    key=t.get("key") or "",
                    operator=t.get("operator") or "Equal",
                    value=t.get("value") or "",
                    effect=t.get("effect") or "",
                )
                for t in pod_spec.get("tolerations") or []
            ],
        )

    @property
    def shape(self) -> tuple[object, ...]:
        """What decides which nodes are eligible."""
        return (tuple(sorted(self.node_selector.items())), tuple(self.tolerations))


@dataclass(frozen=True)
class Placement:
    fits: bool
    message: str


def eligible(node: NodeFacts, gang: Gang) -> bool:
    if not node.ready or node.unschedulable:
        return False
    if any(node.labels.get(k) != v for k, v in gang.node_selector.items()):
        return False
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in gang.tolerations)
        for taint in node.taints
    )


def free_of(node: NodeFacts, used: Demand) -> Free:
    return (
        node.allocatable.gpus - used.gpus,
        # A node that reports no CPU/memory (some fake nodes) is not limited by them.
        (node.allocatable.cpu - used.cpu) if node.allocatable.cpu else float("inf"),
        node.name,
        (node.allocatable.memory - used.memory) if node.allocatable.memory else float("inf"),
    )


def _take(order: list[Free], demand: Demand) -> bool:
    """Place one pod on the tightest node it fits (leaves big holes for big gangs)."""
    for index in range(bisect_left(order, (demand.gpus,)), len(order)):
        gpus, cpu, name, memory = order[index]
        if cpu >= demand.cpu and memory >= demand.memory:
            del order[index]
            insort(order, (gpus - demand.gpus, cpu - demand.cpu, name, memory - demand.memory))
            return True
    return False


def _place(order: list[Free], pending: Iterable[Demand], gang: Gang, usable: int) -> Placement:
    """`order`: the eligible nodes' free capacity, sorted (consumed); `pending`: pods
    released or placed before this gang, placed first."""
    for demand in pending:
        _take(order, demand)
    best = order[-1][0] if order else 0  # before this gang takes any
    placed = 0
    while placed < gang.size and _take(order, gang.demand):
        placed += 1
    if placed == gang.size:
        return Placement(True, f"all {gang.size} pods fit")
    return Placement(
        False,
        f"needs {gang.size} pod(s) with {gang.demand.gpus} GPU(s) each on "
        f"{usable} eligible node(s); only {placed} fit now (most free GPUs on one "
        f"node: {best}). No pod is bound until all of them fit.",
    )


def fit(
    gang: Gang,
    nodes: Iterable[NodeFacts],
    bound: Mapping[str, Demand],
    reserved: Iterable[Demand],
) -> Placement:
    """`bound`: per node, what its non-terminal pods request; `reserved`: pods released
    from their gates that the scheduler has not bound yet."""
    usable = [node for node in nodes if eligible(node, gang)]
    order = sorted(free_of(node, bound.get(node.name, Demand())) for node in usable)
    return _place(order, reserved, gang, len(usable))


EXPIRE_SECONDS = 60.0


class Reservations:
    """Capacity promised to gangs whose pods the pod events do not show ungated yet.

    A gang is placed and then its pods are created ungated or have their gate lifted: API
    calls that take milliseconds to seconds, during which other gangs are checked. Until a
    pod's event shows it ungated (it then counts as bound, or released but unbound, from the
    events themselves) its demand is held here. A reservation whose pod never shows up
    (deleted at once, created by nobody) expires."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._held: dict[PodKey, tuple[Demand, float]] = {}
        self._clock = clock

    def hold(self, key: PodKey, demand: Demand) -> None:
        self._held[key] = (demand, self._clock())

    def drop(self, key: PodKey) -> None:
        self._held.pop(key, None)

    def expire(self) -> None:
        oldest = self._clock() - EXPIRE_SECONDS
        for key in [k for k, (_, since) in self._held.items() if since < oldest]:
            del self._held[key]

    def demands(self) -> list[Demand]:
        return [demand for demand, _ in self._held.values()]

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)


class Capacity:
    """The cluster as placement sees it, kept current event by event."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self.reservations = Reservations(clock)
        self._uses: dict[PodKey, PodUse] = {}  # pods that take something, any owner
        self._bound: dict[str, Demand] = {}  # node -> what its non-terminal pods request
        self._released: dict[PodKey, Demand] = {}
        self._free: dict[str, Free] = {}  # node -> its free capacity, every node
        # gang shape -> its eligible nodes' free capacity, sorted; dropped when a node changes.
        self._by_shape: dict[tuple[object, ...], list[Free]] = {}

    # -- what the events say -------------------------------------------------------------

    def node_seen(self, facts: NodeFacts) -> bool:
        """A node's latest facts; whether its readiness changed (or it is new)."""
        old = self.nodes.get(facts.name)
        if old == facts:
            return False
        self.nodes[facts.name] = facts
        self._free[facts.name] = free_of(facts, self._bound.get(facts.name, Demand()))
        self._by_shape.clear()
        return old is None or old.ready != facts.ready

    def node_gone(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._free.pop(name, None)
            self._by_shape.clear()

    def pod_seen(self, key: PodKey, use: PodUse) -> None:
        if not use.gated:
            # Shown ungated: it counts from its own events from now on.
            self.reservations.drop(key)
        old = self._uses.get(key)
        if old == use:
            return
        if old is not None:
            self._count(key, old, -1)
        if use.nothing:
            self._uses.pop(key, None)
        else:
            self._uses[key] = use
            self._count(key, use, +1)

    def pod_gone(self, key: PodKey) -> None:
        self.reservations.drop(key)
        old = self._uses.pop(key, None)
        if old is not None:
            self._count(key, old, -1)

    def _count(self, key: PodKey, use: PodUse, sign: int) -> None:
        if use.released:
            if sign > 0:
                self._released[key] = use.demand
            else:
                self._released.pop(key, None)
        if use.node is None:
            return
        used = self._bound.get(use.node, Demand())
        used = Demand(
            used.gpus + sign * use.demand.gpus,
            used.cpu + sign * use.demand.cpu,
            used.memory + sign * use.demand.memory,
        )
        self._bound[use.node] = used
        facts = self.nodes.get(use.node)
        if facts is None:
            return  # a node not seen yet: its free capacity is computed when it is
        old, new = self._free[use.node], free_of(facts, used)
        self._free[use.node] = new
        for order in self._by_shape.values():
            at = bisect_left(order, old)
            if at < len(order) and order[at] == old:  # eligible for that shape
                del order[at]
                insort(order, new)

    # -- what placement asks --------------------------------------------------------------

    def gpus_bound(self) -> Mapping[str, int]:
        return {node: used.gpus for node, used in self._bound.items()}

    def fit(self, gang: Gang) -> Placement:
        self.reservations.expire()
        base = self._eligible(gang)
        pending = [*self._released.values(), *self.reservations.demands()]
        return _place(list(base), pending, gang, len(base))

    def hold(self, key: PodKey, demand: Demand) -> None:
        self.reservations.hold(key, demand)

    def drop(self, key: PodKey) -> None:
        self.reservations.drop(key)

    def _eligible(self, gang: Gang) -> list[Free]:
        shape = gang.shape
        order = self._by_shape.get(shape)
        if order is None:
            order = self._by_shape[shape] = sorted(
                self._free[name] for name, node in self.nodes.items() if eligible(node, gang)
            )
        return order
