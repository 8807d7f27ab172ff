"""The workers' side of the Kubernetes backend: a run submitted through the REST API (or by
the eval trigger) becomes its custom resource, which the operator then runs exactly like
one applied with kubectl; a checkpoint promoted through the API becomes its ServedModel's
`spec.checkpoint`, which the operator then rolls the pods to.

The resource carries the run's id (annotation crucible.dev/run-id); when the operator
registers it by uid, the control plane adopts this run instead of creating another.
Creating is idempotent: a redelivered message finds the resource there (409) and stops.
"""

import logging
from functools import cache
from typing import Any

from lightkube import ApiError, Client, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from crucible.db.tables import Run
from crucible.domain import resources

log = logging.getLogger(__name__)


def _resource(kind: str) -> Any:
    info = resources.KIND_BY_NAME[kind]
    return create_namespaced_resource(resources.GROUP, resources.VERSION, info.kind, info.plural)


@cache
def _served_model() -> Any:
    return create_namespaced_resource(
        resources.GROUP,
        resources.VERSION,
        resources.SERVED_MODEL_KIND,
        resources.SERVED_MODEL_PLURAL,
    )


@cache
def _client() -> Client:
    """Built once per worker process, from KUBECONFIG or the in-cluster service account;
    lightkube learns the custom kinds here, so `codecs.from_dict` can load them."""
    for info in resources.KINDS:
        _resource(info.kind)
    return Client(field_manager="crucible-workers")


def custom_resource(run: Run) -> dict[str, Any]:
    manifest = run.manifest
    metadata = manifest.get("metadata") or {}
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {
            "name": run.k8s_name or run.name,
            "namespace": run.k8s_namespace,
            "labels": dict(metadata.get("labels") or {}),
            "annotations": {
                **(metadata.get("annotations") or {}),
                resources.ANNOTATION_RUN_ID: str(run.id),
            },
        },
        "spec": manifest["spec"],
    }


def create_custom_resource(run: Run) -> str:
    """Create the run's resource in its project's namespace; returns what happened."""
    return create_resource(custom_resource(run))


def create_resource(obj: dict[str, Any]) -> str:
    client = _client()
    where = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
    try:
        client.create(codecs.from_dict(obj))
    except ApiError as exc:
        if exc.status.code == 409:
            return f"{where} already exists"
        raise
    return f"created {where}"


def serve_checkpoint(namespace: str, name: str, checkpoint_id: int) -> str:
    """Set the ServedModel's `spec.checkpoint` to `{id: checkpoint_id}`; returns what happened.

    A JSON patch that replaces the whole reference, since a merge patch would keep the `run`
    of one that followed a run and so name two sources. Patching the same id again changes
    nothing (the generation stays), so a redelivered message is harmless. A ServedModel that
    is gone (deleted after the promotion) is reported, not raised: retrying cannot bring it
    back.
    """
    where = f"ServedModel {namespace}/{name}"
    patch = [{"op": "replace", "path": "/spec/checkpoint", "value": {"id": checkpoint_id}}]
    try:
        _client().patch(
            _served_model(), name, patch, namespace=namespace, patch_type=PatchType.JSON
        )
    except ApiError as exc:
        if exc.status.code == 404:
            log.warning("%s is gone; checkpoint %d was not promoted to it", where, checkpoint_id)
            return f"{where} is gone; nothing to promote"
        raise
    return f"{where}: spec.checkpoint set to {checkpoint_id}"


def existing_uids(kind: str, namespace: str) -> set[str]:
    """Uids of the resources of one kind in one namespace (one LIST, however many runs)."""
    resource = _resource(kind)
    return {
        obj.metadata.uid
        for obj in _client().list(resource, namespace=namespace)
        if obj.metadata is not None and obj.metadata.uid is not None
    }
