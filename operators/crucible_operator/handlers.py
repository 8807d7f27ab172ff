"""The kopf wiring: indexes of pods and nodes, one reconcile loop (a kopf daemon) per
custom resource, wake-ups from pod and node events, and the finalizer that records a
deleted resource's end in the control plane. Handlers are registered on a registry made
here (never kopf's global one), so importing this module changes nothing by itself."""

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import httpx
import httpx2  # lightkube's HTTP client
import kopf
from lightkube import ApiError as KubeError

from crucible.client import ApiError
from crucible.domain import reasons
from crucible.domain.enums import TERMINAL_PHASES
from crucible.schemas.runs import AttemptEnd
from crucible_operator import naming
from crucible_operator.context import OperatorContext, memo_context
from crucible_operator.facts import Demand, NodeFacts, PodFacts, node_facts, pod_facts
from crucible_operator.reconcile import Observed, Pass, Tracked

log = logging.getLogger(__name__)

PodIndex = kopf.Index[str, PodFacts]


class Indexes(NamedTuple):
    """kopf's in-memory indexes, passed to handlers by their function names."""

    crucible_pods: PodIndex  # run uid -> its pods
    node_load: kopf.Index[str, Demand]  # node -> requests of its running pods
    cluster_nodes: kopf.Index[str, NodeFacts]  # node -> its facts


RETRY_AFTER_ERROR = 5.0
_TERMINAL = {p.value for p in TERMINAL_PHASES}


def _not_finished(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") not in _TERMINAL


def build_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    ours = {naming.LABEL_RUN_UID: kopf.PRESENT}

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    # -- indexes (kept current by kopf's watches; read by every pass) -------------------------
    # Handlers receive an index as the keyword named by its id (set explicitly: the default
    # id of a nested function is its qualified name).

    @kopf.index("pods", labels=ours, registry=registry, id="crucible_pods")
    def crucible_pods(body: kopf.Body, labels: kopf.Labels, **_: Any) -> dict[str, Any]:
        return {labels[naming.LABEL_RUN_UID]: pod_facts(body)}

    @kopf.index("pods", registry=registry, id="node_load")
    def node_load(body: kopf.Body, spec: kopf.Spec, status: kopf.Status, **_: Any) -> Any:
        node = spec.get("nodeName")
        if not node or status.get("phase") in ("Succeeded", "Failed"):
            # An empty mapping, not None: kopf keeps a pod's previous entry when its index
            # function returns None, so a finished pod kept for its logs would hold its
            # GPUs for as long as it exists, and gangs waiting for them would never start.
            return {}
        return {node: pod_facts(body).demand}

    @kopf.index("nodes", registry=registry, id="cluster_nodes")
    def cluster_nodes(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
        return {name: node_facts(body)}

    # -- wake-ups -----------------------------------------------------------------------------

    @kopf.on.event("pods", labels=ours, registry=registry)
    def pod_changed(
        labels: kopf.Labels, status: kopf.Status, type: str, memo: kopf.Memo, **kw: Any
    ) -> None:
        ctx = memo_context(memo)
        ctx.wake(labels[naming.LABEL_RUN_UID])
        if type == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
            # Capacity freed: gangs waiting for it look again now, not at their next poll.
            crucible_pods: PodIndex = kw["crucible_pods"]
            for uid, store in crucible_pods.items():
                if any(p.gated for p in store):
                    ctx.wake(uid)

    @kopf.on.event("nodes", registry=registry)
    def node_changed(name: str, body: kopf.Body, type: str, memo: kopf.Memo, **kw: Any) -> None:
        ctx = memo_context(memo)
        crucible_pods: PodIndex = kw["crucible_pods"]
        ready = type != "DELETED" and node_facts(body).ready
        if ctx.node_ready.get(name) == ready:
            return
        ctx.node_ready[name] = ready
        for uid, store in crucible_pods.items():
            if any(p.node == name for p in store):
                ctx.wake(uid)

    for info in naming.KINDS:
        _register_kind(registry, info)
    return registry


def _register_kind(registry: kopf.OperatorRegistry, info: naming.KindInfo) -> None:
    resource = (naming.GROUP, naming.VERSION, info.plural)

    @kopf.on.event(*resource, registry=registry)
    def changed(uid: str, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
        ctx = memo_context(memo)
        if uid not in ctx.wakeups:
            return
        # A new spec or a deletion. Not the loop's own status writes, which come back as
        # events too: waking on those doubled the passes. (What the control plane decides,
        # recovery's next attempt among it, comes through the event feed.)
        version = int(meta.get("generation") or 0)
        if ctx.seen_versions.get(uid) != version or meta.get("deletionTimestamp"):
            ctx.seen_versions[uid] = version
            ctx.wake(uid)

    @kopf.daemon(
        *resource,
        registry=registry,
        when=_not_finished,
        cancellation_timeout=10.0,
        id=f"reconcile-{info.plural}",
    )
    async def reconcile_loop(
        body: kopf.Body,
        uid: str,
        stopped: kopf.DaemonStopped,
        memo: kopf.Memo,
        **kw: Any,
    ) -> None:
        ctx = memo_context(memo)
        indexes = Indexes(kw["crucible_pods"], kw["node_load"], kw["cluster_nodes"])
        wake = ctx.wakeups.setdefault(uid, asyncio.Event())
        tracked = Tracked()
        try:
            while not stopped:
                wake.clear()
                delay = await _one_pass(ctx, info, body, tracked, indexes, uid)
                if delay is None:
                    return
                await _sleep(wake, stopped, delay)
        finally:
            ctx.wakeups.pop(uid, None)
            ctx.seen_versions.pop(uid, None)
            if tracked.run_id is not None:
                ctx.changes.forget(tracked.run_id)

    @kopf.on.delete(*resource, registry=registry, id=f"record-deletion-{info.plural}")
    async def record_deletion(status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
        """Before the resource goes: the run is Cancelled and its open attempt ended in the
        control plane (its pods then go with it, through their owner references)."""
        run_id = status.get("runId")
        if not run_id or status.get("phase") in _TERMINAL:
            return
        ctx = memo_context(memo)
        try:
            await ctx.call(ctx.api.cancel_run, int(run_id))
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise kopf.TemporaryError(str(exc), delay=RETRY_AFTER_ERROR) from exc
        attempts = await ctx.call(ctx.api.list_attempts, int(run_id))
        if attempts and attempts[-1].ended_at is None:
            try:
                await ctx.call(
                    ctx.api.end_attempt,
                    int(run_id),
                    attempts[-1].number,
                    AttemptEnd(
                        end_reason=reasons.REASON_CANCELLED_BY_USER,
                        message="the resource was deleted",
                    ),
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise kopf.TemporaryError(str(exc), delay=RETRY_AFTER_ERROR) from exc


async def _one_pass(
    ctx: OperatorContext,
    info: naming.KindInfo,
    body: kopf.Body,
    tracked: Tracked,
    indexes: "Indexes",
    uid: str,
) -> float | None:
    started = time.perf_counter()
    try:

        def observe(*, capacity: bool = False) -> Observed:
            return _observe(ctx, indexes, uid, capacity=capacity)

        return await Pass(ctx, body, tracked, observe).run()
    except Exception as exc:
        # The API restarting, a conflict, a timeout, a bug: the next pass starts from the
        # observed state again, so retrying is always safe, and a loop that died would
        # strand its run.
        ctx.metrics.reconcile_errors.labels(info.kind).inc()
        expected = isinstance(
            exc, ApiError | KubeError | OSError | httpx.TransportError | httpx2.TransportError
        )
        log.warning(
            "%s %s: reconcile failed, retrying: %s",
            info.kind,
            body.get("metadata", {}).get("name"),
            exc,
            exc_info=not expected,
        )
        tracked.attempts_known = False
        tracked.last_read = None  # the pass may have changed the run before it failed
        return RETRY_AFTER_ERROR
    finally:
        ctx.metrics.reconcile_seconds.labels(info.kind).observe(time.perf_counter() - started)


class NodeView(Mapping[str, NodeFacts]):
    """kopf's node index read as name -> facts in place: copying 1,000 nodes into a dict on
    every pass was a tenth of the operator's event loop at N = 500."""

    def __init__(self, index: kopf.Index[str, NodeFacts]) -> None:
        self._index = index

    def __getitem__(self, name: str) -> NodeFacts:
        for facts in self._index.get(name, ()):
            return facts
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name, store in self._index.items() if store)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _observe(
    ctx: OperatorContext, indexes: "Indexes", uid: str, *, capacity: bool = False
) -> Observed:
    crucible_pods, node_load, cluster_nodes = indexes
    mine = list(crucible_pods.get(uid, []))
    nodes = NodeView(cluster_nodes)
    if not capacity:
        return Observed(pods=mine, nodes=nodes)
    bound: dict[str, Demand] = {}
    for node, demands in node_load.items():
        total = Demand()
        for d in demands:
            total = Demand(total.gpus + d.gpus, total.cpu + d.cpu, total.memory + d.memory)
        bound[node] = total
    released = []
    ungated = []
    for store in crucible_pods.values():
        for pod in store:
            if pod.gated:
                continue
            ungated.append((pod.namespace, pod.name))
            if not pod.terminal and pod.node is None:
                released.append(pod.demand)
    # Placed pods the index shows ungated now count from the index itself.
    ctx.reservations.settle(ungated)
    return Observed(pods=mine, nodes=nodes, bound=bound, released=released)


# After a wake-up, wait this long for the burst it belongs to (a pod is created, ungated,
# bound and started within a few hundred milliseconds): one pass then sees all of it.
COALESCE_SECONDS = 0.05


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
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
