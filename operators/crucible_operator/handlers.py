"""The kopf wiring: indexes of pods and nodes, one reconcile loop (a kopf daemon) per
custom resource, wake-ups from pod and node events, and the finalizer that records a
deleted resource's end in the control plane; ServedModels' and Sweeps' handlers come from
serving.py and sweeps.py. Handlers are registered on a registry made here (never kopf's
global one), so importing this module changes nothing by itself."""

import logging
import time
from typing import Any

import httpx
import httpx2  # lightkube's HTTP client
import kopf
from lightkube import ApiError as KubeError

from crucible.client import ApiError, calls
from crucible.domain import reasons
from crucible.domain.enums import TERMINAL_PHASES
from crucible.schemas.runs import AttemptEnd
from crucible_operator import naming, run_tokens
from crucible_operator.context import OperatorContext, memo_context, sleep_until_woken
from crucible_operator.facts import PodFacts, node_facts, pod_facts, pod_use
from crucible_operator.reconcile import Pass, Tracked
from crucible_operator.run_view import RunView
from crucible_operator.serving import register_served_models
from crucible_operator.sweeps import register_sweeps

log = logging.getLogger(__name__)

PodIndex = kopf.Index[str, PodFacts]

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

    # Every handler below is a coroutine although none awaits: kopf runs a plain function on
    # a thread of its executor, a hand-off (and a GIL switch) for each handler every pod
    # event calls, which made these hand-offs a large share of the operator's CPU at a
    # thousand runs (benchmarks/README.md, scheduling vs Kubeflow).

    # -- indexes (kept current by kopf's watches; read by every pass) -------------------------
    # Handlers receive an index as the keyword named by its id (set explicitly: the default
    # id of a nested function is its qualified name). kopf starts no reconcile loop before
    # every index has seen its first listing, so the capacity below, fed by two indexes, has
    # every node and bound pod before the first gang is placed.

    @kopf.index("pods", labels=ours, registry=registry, id="crucible_pods")
    async def crucible_pods(body: kopf.Body, labels: kopf.Labels, **_: Any) -> dict[str, Any]:
        return {labels[naming.LABEL_RUN_UID]: pod_facts(body)}

    @kopf.index("pods", registry=registry, id="pod_capacity")
    async def pod_capacity(
        body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
    ) -> dict[str, Any]:
        memo_context(memo).capacity.pod_seen((namespace or "", name), pod_use(body))
        return {}  # kept in the capacity, not in kopf's index (deletions: pod_changed)

    @kopf.index("nodes", registry=registry, id="node_capacity")
    async def node_capacity(body: kopf.Body, memo: kopf.Memo, **kw: Any) -> dict[str, Any]:
        ctx = memo_context(memo)
        facts = node_facts(body)
        if ctx.capacity.node_seen(facts):  # new, or its readiness changed
            _wake_runs_on(ctx, kw["crucible_pods"], facts.name)
        return {}  # kept in the capacity (deletions: node_changed)

    # -- wake-ups -----------------------------------------------------------------------------

    @kopf.on.event("pods", registry=registry)
    async def pod_changed(
        type: str,
        namespace: str | None,
        name: str,
        labels: kopf.Labels,
        status: kopf.Status,
        memo: kopf.Memo,
        **kw: Any,
    ) -> None:
        ctx = memo_context(memo)
        if type == "DELETED":
            ctx.capacity.pod_gone((namespace or "", name))
        uid = labels.get(naming.LABEL_RUN_UID)
        if uid is None:
            return
        ctx.loops.wake(uid)
        if type == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
            # Capacity freed: gangs waiting for it look again now, not at their next poll.
            pods: PodIndex = kw["crucible_pods"]
            for run_uid, store in pods.items():
                if any(p.gated for p in store):
                    ctx.loops.wake(run_uid)

    @kopf.on.event("nodes", registry=registry)
    async def node_changed(name: str, type: str, memo: kopf.Memo, **kw: Any) -> None:
        if type == "DELETED":
            ctx = memo_context(memo)
            ctx.capacity.node_gone(name)
            _wake_runs_on(ctx, kw["crucible_pods"], name)

    for info in naming.KINDS:
        _register_kind(registry, info)
    register_served_models(registry)
    register_sweeps(registry)
    return registry


def _wake_runs_on(ctx: OperatorContext, pods: PodIndex, node: str) -> None:
    for uid, store in pods.items():
        if any(p.node == node for p in store):
            ctx.loops.wake(uid)


def _register_kind(registry: kopf.OperatorRegistry, info: naming.KindInfo) -> None:
    resource = (naming.GROUP, naming.VERSION, info.plural)

    @kopf.on.event(*resource, registry=registry)
    async def changed(uid: str, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
        # A new spec or a deletion. (What the control plane decides, recovery's next attempt
        # among it, comes through the event feed.)
        loops = memo_context(memo).loops
        if uid not in loops:
            return
        if meta.get("deletionTimestamp"):
            loops.wake(uid)
        else:
            loops.wake_on_generation(uid, int(meta.get("generation") or 0))

    @kopf.daemon(
        *resource,
        registry=registry,
        when=_not_finished,
        # The status write that makes a run terminal also turns `when` false, and the watch
        # event can arrive while that pass still awaits the write's answer: asked to stop
        # (`stopped`) rather than cancelled at once, the pass finishes, its events included.
        cancellation_backoff=5.0,
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
        pods: PodIndex = kw["crucible_pods"]
        wake = ctx.loops.start(uid)
        tracked = Tracked(RunView(ctx, uid))
        try:
            while not stopped:
                wake.clear()
                delay = await _one_pass(ctx, info, body, tracked, list(pods.get(uid, [])))
                if delay is None:
                    return
                await sleep_until_woken(wake, stopped, delay)
        finally:
            ctx.loops.end(uid)
            tracked.view.forget()

    @kopf.on.delete(*resource, registry=registry, id=f"record-deletion-{info.plural}")
    async def record_deletion(status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
        """Before the resource goes: the run is Cancelled, its open attempt ended and its
        tokens revoked in the control plane (its pods and token Secret then go with it,
        through their owner references). A run already ended had its tokens revoked then."""
        run_id = status.get("runId")
        if not run_id or status.get("phase") in _TERMINAL:
            return
        ctx = memo_context(memo)
        try:
            await ctx.call(calls.cancel_run(int(run_id)))
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise kopf.TemporaryError(str(exc), delay=RETRY_AFTER_ERROR) from exc
        attempts = await ctx.call(calls.list_attempts(int(run_id)))
        if attempts and attempts[-1].ended_at is None:
            end = AttemptEnd(
                end_reason=reasons.REASON_CANCELLED_BY_USER, message="the resource was deleted"
            )
            try:
                await ctx.call(calls.end_attempt(int(run_id), attempts[-1].number, end))
            except ApiError as exc:
                if exc.status != 409:
                    raise kopf.TemporaryError(str(exc), delay=RETRY_AFTER_ERROR) from exc
        try:
            await run_tokens.revoke_named(ctx, int(run_id))
        except ApiError as exc:
            raise kopf.TemporaryError(str(exc), delay=RETRY_AFTER_ERROR) from exc


async def _one_pass(
    ctx: OperatorContext,
    info: naming.KindInfo,
    body: kopf.Body,
    tracked: Tracked,
    pods: list[PodFacts],
) -> float | None:
    started = time.perf_counter()
    try:
        return await Pass(ctx, body, tracked, pods).run()
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
        tracked.view.doubt()  # the pass may have changed the run before it failed
        return RETRY_AFTER_ERROR
    finally:
        ctx.metrics.reconcile_seconds.labels(info.kind).observe(time.perf_counter() - started)
