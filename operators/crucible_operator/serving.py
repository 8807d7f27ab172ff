"""The kopf wiring and the reconcile pass of ServedModels: one loop per resource (a kopf
daemon), woken by its spec changing and by its Deployment's events, and every
`FOLLOW_SECONDS` otherwise, so that a checkpoint named by its run (`latest`, `best:`)
follows that run.

A pass reports what it sees to the control plane (which answers with the checkpoint the
spec's reference resolves to now), makes the Deployment serve that checkpoint (a rolling
update when it changed), keeps the Service, and writes the status. A reference that does
not resolve leaves a serving Deployment as it is: the message says why, the pods keep
answering.
"""

import logging
from collections.abc import Mapping
from typing import Any

import kopf
from lightkube import ApiError as KubeError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Service

from crucible.client import ApiError, calls
from crucible.domain.enums import Backend
from crucible.domain.specs import CheckpointRef
from crucible.schemas.deployments import CheckpointBrief, DeploymentPhase, DeploymentReport
from crucible_operator import naming
from crucible_operator.cluster_writes import patch_status
from crucible_operator.context import OperatorContext, memo_context, sleep_until_woken
from crucible_operator.registration import ensure_token_secret, project_for
from crucible_operator.served_pods import (
    ANNOTATION_SPEC_HASH,
    LABEL_SERVED_MODEL_UID,
    build_deployment,
    build_service,
    url_of,
)
from crucible_operator.served_status import PENDING, ROLLING, Observed, observe

log = logging.getLogger(__name__)

PLURAL = naming.SERVED_MODEL_PLURAL
FOLLOW_SECONDS = 15.0  # a run's newer checkpoint is served within this (plus the roll)
WATCH_SECONDS = 2.0  # while pods start or roll
RETRY_SECONDS = 5.0


def register_served_models(registry: kopf.OperatorRegistry) -> None:
    resource = (naming.GROUP, naming.VERSION, PLURAL)

    @kopf.on.event(*resource, registry=registry)
    async def spec_changed(uid: str, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
        memo_context(memo).loops.wake_on_generation(uid, int(meta.get("generation") or 0))

    @kopf.on.event(
        "apps",
        "v1",
        "deployments",
        labels={LABEL_SERVED_MODEL_UID: kopf.PRESENT},
        registry=registry,
    )
    async def deployment_changed(labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
        memo_context(memo).loops.wake(labels[LABEL_SERVED_MODEL_UID])

    @kopf.daemon(
        *resource,
        registry=registry,
        cancellation_backoff=5.0,
        cancellation_timeout=10.0,
        id=f"serve-{PLURAL}",
    )
    async def serve_loop(
        body: kopf.Body, uid: str, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any
    ) -> None:
        ctx = memo_context(memo)
        wake = ctx.loops.start(uid)
        try:
            while not stopped:
                wake.clear()
                delay = await _one_pass(ctx, body)
                await sleep_until_woken(wake, stopped, delay)
        finally:
            ctx.loops.end(uid)

    @kopf.on.delete(*resource, registry=registry, id=f"forget-{PLURAL}")
    async def forget(meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
        """The control plane stops listing it; its Deployment and Service go with it
        (owner references)."""
        ctx = memo_context(memo)
        project = ctx.namespaces.projects.get(meta["namespace"])
        if project is None:
            project = await project_for(ctx, meta["namespace"])
        try:
            await ctx.call(calls.remove_deployment(Backend.kubernetes, project, meta["name"]))
        except ApiError as exc:
            raise kopf.TemporaryError(str(exc), delay=RETRY_SECONDS) from exc


async def _one_pass(ctx: OperatorContext, body: kopf.Body) -> float:
    try:
        return await reconcile(ctx, body)
    except Exception as exc:
        # Like a run's loop: the next pass starts from what it observes, so retrying is safe.
        log.warning(
            "ServedModel %s: reconcile failed, retrying: %s",
            body.get("metadata", {}).get("name"),
            exc,
            exc_info=not isinstance(exc, ApiError | KubeError | OSError),
        )
        return RETRY_SECONDS


async def reconcile(ctx: OperatorContext, owner: kopf.Body) -> float:
    body: dict[str, Any] = dict(owner)  # a snapshot: one pass sees one version
    meta, spec = body["metadata"], body.get("spec") or {}
    name, namespace = meta["name"], meta["namespace"]
    old_status = body.get("status") or {}
    project = await project_for(ctx, namespace)
    await ensure_token_secret(ctx, namespace, project)

    current = await _read_deployment(ctx, name, namespace)
    served_before = (old_status.get("checkpoint") or {}).get("id")
    seen = observe(current, int(spec.get("replicas", 1)), served_before)
    answer = await ctx.call(
        calls.report_deployment(
            Backend.kubernetes,
            project,
            name,
            DeploymentReport(
                uid=meta["uid"],
                checkpoint=CheckpointRef.model_validate(spec["checkpoint"]),
                replicas=seen.replicas,
                ready_replicas=seen.ready_replicas,
                serving_checkpoint_id=seen.serving,
                phase=DeploymentPhase(seen.phase),
                message=seen.message,
                url=url_of(body),
            ),
        )
    )
    message = seen.message
    if answer.checkpoint_id is None:
        message = f"{answer.resolve_error}" + (
            "; the pods keep serving what they serve" if current is not None else ""
        )
    else:
        wanted = build_deployment(body, answer.checkpoint_id, project, ctx.options)
        kopf.adopt(wanted, owner=owner)
        await _apply(ctx, current, wanted)
        service = build_service(body)
        kopf.adopt(service, owner=owner)
        await _ensure_service(ctx, service)

    status = {
        "phase": seen.phase,
        "message": message,
        "checkpoint": _brief(answer.serving) if seen.serving is not None else None,
        "wantedCheckpoint": _brief(answer.resolved),
        "replicas": seen.replicas,
        "readyReplicas": seen.ready_replicas,
        "url": url_of(body),
        "deploymentId": answer.id,
        "observedGeneration": int(meta.get("generation") or 0),
    }
    if any(old_status.get(key) != value for key, value in status.items()):
        await patch_status(ctx.kube, naming.SERVED_MODEL_KIND, meta, status)
    return WATCH_SECONDS if _unsettled(seen, answer.checkpoint_id) else FOLLOW_SECONDS


def _unsettled(seen: Observed, wanted: int | None) -> bool:
    return seen.phase in (PENDING, ROLLING) or (wanted is not None and seen.serving != wanted)


def _brief(checkpoint: CheckpointBrief | None) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    return {"id": checkpoint.id, "run": checkpoint.run_name, "step": checkpoint.step}


async def _read_deployment(
    ctx: OperatorContext, name: str, namespace: str
) -> dict[str, Any] | None:
    try:
        found = await ctx.kube.get(Deployment, name, namespace=namespace)
    except KubeError as exc:
        if exc.status.code == 404:
            return None
        raise
    return dict(found.to_dict())


async def _apply(
    ctx: OperatorContext, current: Mapping[str, Any] | None, wanted: dict[str, Any]
) -> None:
    """Create the Deployment, or apply the new one when what it is built from changed (a new
    checkpoint, image, replica count...): the Deployment controller rolls the pods. Server-
    side apply, so a field this operator set before and no longer sets is removed."""
    if current is not None:
        built_from = (current["metadata"].get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
        if built_from == wanted["metadata"]["annotations"][ANNOTATION_SPEC_HASH]:
            return
    await ctx.kube.apply(Deployment.from_dict(wanted), force=True)


async def _ensure_service(ctx: OperatorContext, service: dict[str, Any]) -> None:
    try:
        await ctx.kube.create(Service.from_dict(service))
    except KubeError as exc:
        if exc.status.code != 409:
            raise
