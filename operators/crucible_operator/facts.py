"""What the operator reads from pods and nodes, reduced to the facts its decisions use.

kopf indexes hold these small frozen records instead of whole objects: the pod index is
keyed by the owning run's uid, the node index by node name, and the decisions in gang.py
and outcome.py are pure functions of them.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crucible_operator import naming

GPU = "nvidia.com/gpu"
_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def quantity(value: str | int | float | None) -> float:
    """A Kubernetes quantity as a number: '8' -> 8, '500m' -> 0.5, '64Gi' -> 68719476736."""
    if value is None:
        return 0.0
    text = str(value).strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    for suffix, factor in _SUFFIXES.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@dataclass(frozen=True)
class Demand:
    """What one pod requests."""

    gpus: int = 0
    cpu: float = 0.0
    memory: float = 0.0


@dataclass(frozen=True)
class Termination:
    """How a container ended."""

    exit_code: int
    reason: str  # Completed, Error, OOMKilled, ...
    message: str = ""  # what the workload wrote to its termination log
    # RFC 3339 in UTC as the kubelet writes it ("2026-12-02T20:39:15Z"), so these sort in
    # time order as strings; "" when the status has none.
    finished_at: str = ""


@dataclass(frozen=True)
class PodFacts:
    name: str
    namespace: str
    run_uid: str
    attempt: int
    rank: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None
    gated: bool
    deleting: bool
    demand: Demand
    # Condition type -> (status, reason, message), for PodScheduled and DisruptionTarget.
    conditions: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    status_reason: str = ""  # "Evicted" when the kubelet evicted it
    status_message: str = ""
    terminations: tuple[Termination, ...] = ()
    # (reason, message) of each container still waiting to start (ErrImagePull, ...)
    waiting: tuple[tuple[str, str], ...] = ()
    # The workload container's image, and the digest the kubelet resolved it to.
    image: str | None = None
    image_id: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def demand_of(spec: Mapping[str, Any]) -> Demand:
    """What a pod spec requests, summed over its containers."""
    gpus, cpu, memory = 0, 0.0, 0.0
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        limits = (container.get("resources") or {}).get("limits") or {}
        gpus += int(quantity(requests.get(GPU, limits.get(GPU))))
        cpu += quantity(requests.get("cpu"))
        memory += quantity(requests.get("memory"))
    return Demand(gpus=gpus, cpu=cpu, memory=memory)


def pod_facts(body: Mapping[str, Any]) -> PodFacts:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels = meta.get("labels") or {}
    image = image_id = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == naming.WORKLOAD_CONTAINER:
            image, image_id = cs.get("image") or None, cs.get("imageID") or None
    # An init container (the code package's fetch) that cannot start or fails is why the pod
    # fails; one that finished says nothing about it.
    inits = status.get("initContainerStatuses") or []
    waiting = _waiting(inits) + _waiting(status.get("containerStatuses") or [])
    terminations = [t for t in _terminations(inits) if t.exit_code != 0]
    terminations += _terminations(status.get("containerStatuses") or [])
    return PodFacts(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        run_uid=labels.get(naming.LABEL_RUN_UID, ""),
        attempt=int(labels.get(naming.LABEL_ATTEMPT, 0)),
        rank=int(labels.get(naming.LABEL_RANK, 0)),
        phase=status.get("phase") or "Pending",
        node=spec.get("nodeName"),
        gated=bool(spec.get("schedulingGates")),
        deleting=meta.get("deletionTimestamp") is not None,
        demand=demand_of(spec),
        conditions={
            c["type"]: (c.get("status", ""), c.get("reason") or "", c.get("message") or "")
            for c in status.get("conditions") or []
            if c.get("type") in ("PodScheduled", "DisruptionTarget")
        },
        status_reason=status.get("reason") or "",
        status_message=status.get("message") or "",
        terminations=tuple(terminations),
        waiting=tuple(waiting),
        image=image,
        image_id=image_id,
    )


def _waiting(statuses: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [
        (state.get("reason") or "", (state.get("message") or "").strip())
        for cs in statuses
        if (state := (cs.get("state") or {}).get("waiting")) is not None
    ]


def _terminations(statuses: list[Mapping[str, Any]]) -> list[Termination]:
    return [
        Termination(
            int(terminated.get("exitCode", 0)),
            terminated.get("reason") or "",
            (terminated.get("message") or "").strip(),
            terminated.get("finishedAt") or "",
        )
        for cs in statuses
        if (terminated := (cs.get("state") or {}).get("terminated"))
    ]


@dataclass(frozen=True)
class PodUse:
    """What one pod, of any owner, takes from the cluster's capacity now."""

    node: str | None  # bound to it (non-terminal pods only)
    demand: Demand
    released: bool  # one of ours, ungated, not bound yet, not terminal: about to take it
    gated: bool

    @property
    def nothing(self) -> bool:
        return self.node is None and not self.released


def pod_use(body: Mapping[str, Any]) -> PodUse:
    """Read without the rest of `pod_facts`: every pod of the cluster comes through here."""
    spec = body.get("spec") or {}
    gated = bool(spec.get("schedulingGates"))
    if (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return PodUse(None, Demand(), released=False, gated=gated)
    node = spec.get("nodeName") or None
    ours = naming.LABEL_RUN_UID in ((body.get("metadata") or {}).get("labels") or {})
    released = node is None and ours and not gated
    return PodUse(node, demand_of(spec), released, gated)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeFacts:
    name: str
    ready: bool
    unschedulable: bool
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Demand


def node_facts(body: Mapping[str, Any]) -> NodeFacts:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return NodeFacts(
        name=meta.get("name", ""),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(
            Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
            for t in spec.get("taints") or []
        ),
        allocatable=Demand(
            gpus=int(quantity(allocatable.get(GPU))),
            cpu=quantity(allocatable.get("cpu")),
            memory=quantity(allocatable.get("memory")),
        ),
    )
