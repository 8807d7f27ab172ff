"""The kopf wiring of Sweeps. A Sweep applied with kubectl is registered with the control
plane (`POST /api/v1/sweeps`, by its uid, in its namespace's project), whose workers then
start its trials as TrainingRuns in that namespace, which this operator runs like any other.
A timer keeps the Sweep's status in step with the control plane's sweep until it ends, and
deleting the Sweep cancels the sweep. No pods are created for a Sweep itself.

A Sweep the control plane refuses (422: a parameter path or value no trial could run with;
409: its name taken by a sweep of another spec) ends Failed with the answer as its message
and a Warning Event, and is not tried again: its spec is immutable (crds.py), so every
retry would be refused the same way.
"""

import logging
from collections.abc import Mapping
from typing import Any

import kopf
from lightkube import ApiError as KubeError

from crucible.client import ApiError
from crucible.client.calls import cancel_sweep, get_sweep, list_sweeps, submit_sweep
from crucible.domain import reasons
from crucible.domain.enums import TERMINAL_PHASES, Phase
from crucible.schemas.sweeps import SweepPublic
from crucible_operator import naming, registration
from crucible_operator.cluster_writes import patch_status
from crucible_operator.context import OperatorContext, memo_context
from crucible_operator.sweep_status import changed, refused_status, status_of, submission

log = logging.getLogger(__name__)

FOLLOW_SECONDS = 10.0  # a trial started or ended shows in the status within this
RETRY_SECONDS = 5.0
_TERMINAL = {p.value for p in TERMINAL_PHASES}


def _running(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") not in _TERMINAL


def register_sweeps(registry: kopf.OperatorRegistry) -> None:
    resource = (naming.GROUP, naming.VERSION, naming.SWEEP_PLURAL)

    # A timer, not a loop woken by events like a run's: nothing in the cluster tells of a
    # sweep's progress, only the control plane does.
    @kopf.timer(
        *resource,
        registry=registry,
        interval=FOLLOW_SECONDS,
        when=_running,
        id=f"follow-{naming.SWEEP_PLURAL}",
    )
    async def follow(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        try:
            await reconcile(memo_context(memo), body)
        except Exception as exc:
            # The API restarting, a conflict, a timeout: the next tick starts from what it
            # observes (registration is by uid), so it is the retry.
            log.warning(
                "Sweep %s: reconcile failed, retrying: %s",
                body.get("metadata", {}).get("name"),
                exc,
                exc_info=not isinstance(exc, ApiError | KubeError | OSError),
            )

    @kopf.on.delete(*resource, registry=registry, id=f"cancel-{naming.SWEEP_PLURAL}")
    async def cancel(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        """A deleted Sweep starts no more trials, and its running ones are cancelled (their
        TrainingRuns stay, Cancelled, with their history)."""
        status = body.get("status") or {}
        if status.get("phase") in _TERMINAL:
            return
        ctx = memo_context(memo)
        try:
            sweep_id = status.get("sweepId") or await _find(ctx, body["metadata"])
            if sweep_id is not None:
                await ctx.call(cancel_sweep(int(sweep_id)))
        except ApiError as exc:
            if exc.status != 404:
                raise kopf.TemporaryError(str(exc), delay=RETRY_SECONDS) from exc


async def reconcile(ctx: OperatorContext, owner: kopf.Body) -> None:
    """Register the Sweep if the control plane has no sweep for it, then write its status
    from the control plane's sweep; Events go out after the status write."""
    body: dict[str, Any] = dict(owner)  # a snapshot: one pass sees one version
    meta, old = body["metadata"], body.get("status") or {}
    generation = int(meta.get("generation") or 0)
    events: list[tuple[str, str, str]] = []
    try:
        sweep = await _known(ctx, old.get("sweepId"))
        if sweep is None:
            sweep = await _register(ctx, body)
            events.append(("Normal", "Registered", f"sweep {sweep.id} in the control plane"))
    except registration.RegistrationRefused as exc:
        status = refused_status(str(exc), generation)
        events.append(("Warning", reasons.REASON_INVALID_SPEC, str(exc)))
    else:
        status = status_of(sweep, generation)
        if sweep.phase.is_terminal and old.get("phase") != sweep.phase.value:
            type_ = "Normal" if sweep.phase is Phase.Succeeded else "Warning"
            events.append((type_, sweep.phase.value, sweep.message or sweep.phase.value))
    if changed(old, status):
        await patch_status(ctx.kube, naming.SWEEP_KIND, meta, status)
    for type_, reason, message in events:
        kopf.event(owner, type=type_, reason=reason, message=message[:1024])


async def _known(ctx: OperatorContext, sweep_id: Any) -> SweepPublic | None:
    """The sweep the status names; None when it names none, or one the control plane does
    not know (restored from an older backup, or another one): then it is registered again."""
    if not sweep_id:
        return None
    try:
        return await ctx.call(get_sweep(int(sweep_id)))
    except ApiError as exc:
        if exc.status != 404:
            raise
        log.warning("sweep %s is unknown to the control plane; registering it again", sweep_id)
        return None


async def _register(ctx: OperatorContext, body: Mapping[str, Any]) -> SweepPublic:
    project = await registration.project_for(ctx, body["metadata"]["namespace"])
    try:
        request = submission(body, project)
    except ValueError as exc:  # the CRD's schema let through what the API's models refuse
        raise registration.RegistrationRefused(f"the spec is invalid: {exc}") from exc
    try:
        return await ctx.call(submit_sweep(request))
    except ApiError as exc:
        if exc.status in (409, 422):
            raise registration.RegistrationRefused(str(exc)) from exc
        raise


async def _find(ctx: OperatorContext, meta: Mapping[str, Any]) -> int | None:
    """The sweep registered for this object when its status never said so (the operator
    stopped between the registration and the status write): found by uid, without making
    a project for a namespace that has none."""
    if meta["namespace"] not in ctx.namespaces.projects:
        await registration.learn_projects(ctx)
    project = ctx.namespaces.projects.get(meta["namespace"])
    cursor = None
    while project is not None:
        page = await ctx.call(list_sweeps(project, cursor))
        found = next((s.id for s in page.items if s.k8s_uid == meta["uid"]), None)
        if found is not None or page.next_cursor is None:
            return found
        cursor = page.next_cursor
    return None
