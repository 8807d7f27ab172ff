"""All pods of an attempt or none: does the whole gang fit on the cluster right now?

An attempt's pods are created with a scheduling gate (naming.GANG_GATE), so the scheduler
ignores them and they hold nothing. The operator lifts the gate from all of them at once,
and only when this check places every pod: a node must be Ready, schedulable, match the
run's nodeSelector, have every NoSchedule/NoExecute taint tolerated, and have the GPUs,
CPU and memory left after the pods already bound to it and the pods of gangs released
earlier but not yet bound (reserved first, so two gangs released back to back do not
both count the same GPUs). The scheduler then binds them; when it cannot (something this
check does not model, such as affinity), its reason is surfaced on the run.
"""

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from crucible_operator.facts import Demand, NodeFacts, Taint


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


@dataclass(frozen=True)
class Placement:
    fits: bool
    message: str


@dataclass
class _Free:
    name: str
    gpus: int
    cpu: float
    memory: float

    def take(self, demand: Demand) -> bool:
        if demand.gpus > self.gpus or demand.cpu > self.cpu or demand.memory > self.memory:
            return False
        self.gpus -= demand.gpus
        self.cpu -= demand.cpu
        self.memory -= demand.memory
        return True


def eligible(node: NodeFacts, gang: Gang) -> bool:
    if not node.ready or node.unschedulable:
        return False
    if any(node.labels.get(k) != v for k, v in gang.node_selector.items()):
        return False
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in gang.tolerations)
        for taint in node.taints
    )


class Eligibility:
    """`eligible` per node and gang shape, remembered while the node's facts stay the same
    object (kopf's index holds new facts after each event of that node). Checking all
    1,000 nodes' taints and labels again for every gang was most of a fit's time."""

    def __init__(self) -> None:
        self._seen: dict[tuple[object, ...], dict[str, tuple[NodeFacts, bool]]] = {}

    def usable(self, gang: Gang, nodes: Iterable[NodeFacts]) -> list[NodeFacts]:
        shape = (tuple(sorted(gang.node_selector.items())), tuple(gang.tolerations))
        seen = self._seen.setdefault(shape, {})
        found = []
        for node in nodes:
            known = seen.get(node.name)
            if known is None or known[0] is not node:
                known = seen[node.name] = (node, eligible(node, gang))
            if known[1]:
                found.append(node)
        return found


class _FreeNodes:
    """The eligible nodes' free capacity, kept sorted tightest first by (GPUs, CPU, name),
    so that placing a pod is a binary search to the first node with enough GPUs, not a
    sort of every node: `fit` places every reserved pod cluster-wide before the gang, and
    with 1,000 nodes and hundreds of released pods a sort per pod took the operator's whole
    CPU (benchmarks/results/scheduling_vs_kubeflow.json)."""

    def __init__(self, free: Iterable[_Free]) -> None:
        self.order = sorted(free, key=_tightness)
        self.keys = [_tightness(f) for f in self.order]

    def most_gpus(self) -> int:
        return self.order[-1].gpus if self.order else 0

    def place(self, demand: Demand, count: int) -> int:
        """Place up to `count` pods, each on the tightest node it fits (leaves big holes for
        big gangs); how many were placed."""
        for placed in range(count):
            start = bisect_left(self.keys, (demand.gpus,))
            for index in range(start, len(self.order)):
                node = self.order[index]
                if node.take(demand):
                    del self.order[index], self.keys[index]
                    key = _tightness(node)
                    at = bisect_left(self.keys, key)
                    self.keys.insert(at, key)
                    self.order.insert(at, node)
                    break
            else:
                return placed
        return count


def _tightness(free: _Free) -> tuple[int, float, str]:
    return (free.gpus, free.cpu, free.name)


def fit(
    gang: Gang,
    nodes: Iterable[NodeFacts],
    bound: Mapping[str, Demand],
    reserved: Iterable[Demand],
    eligibility: Eligibility | None = None,
) -> Placement:
    """`bound`: per node, what its non-terminal pods request; `reserved`: pods released
    from their gates that the scheduler has not bound yet."""
    if eligibility is None:
        usable = [n for n in nodes if eligible(n, gang)]
    else:
        usable = eligibility.usable(gang, nodes)
    free = []
    for node in usable:
        used = bound.get(node.name, Demand())
        free.append(
            _Free(
                node.name,
                node.allocatable.gpus - used.gpus,
                # A node that reports no CPU/memory (some fake nodes) is not limited by them.
                (node.allocatable.cpu - used.cpu) if node.allocatable.cpu else float("inf"),
                (node.allocatable.memory - used.memory)
                if node.allocatable.memory
                else float("inf"),
            )
        )
    nodes_free = _FreeNodes(free)
    for demand in reserved:
        nodes_free.place(demand, 1)
    best = nodes_free.most_gpus()  # before this gang takes any
    placed = nodes_free.place(gang.demand, gang.size)
    if placed == gang.size:
        return Placement(True, f"all {gang.size} pods fit")
    return Placement(
        False,
        f"needs {gang.size} pod(s) with {gang.demand.gpus} GPU(s) each on "
        f"{len(usable)} eligible node(s); only {placed} fit now (most free GPUs on one "
        f"node: {best}). No pod is bound until all of them fit.",
    )
