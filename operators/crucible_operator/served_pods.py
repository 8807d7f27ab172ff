"""Build what serves a ServedModel: a Deployment of `crucible serve` pods and a Service in
front of them. Pure functions of the resource and the checkpoint it serves now, so they are
unit-tested without a cluster.

A new checkpoint (or image) changes the pod template, and the Deployment rolls it one pod at
a time: a new pod first (maxSurge 1), an old one only once the new one is ready
(maxUnavailable 0). An old pod is taken out of the Service's endpoints when it starts
terminating; it keeps listening through its preStop pause, while kube-proxy catches up,
then stops taking connections and finishes the requests it has (uvicorn's graceful
shutdown), within the termination grace period.
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from crucible_operator import naming
from crucible_operator.pods import (
    WORKSPACE,
    PodOptions,
    container_security,
    pod_security,
    resources_of,
    tolerations_of,
)

SERVE_PORT = 8000
LABEL_SERVED_MODEL = f"{naming.GROUP}/served-model"  # the resource's name: the selector
LABEL_SERVED_MODEL_UID = f"{naming.GROUP}/served-model-uid"  # which resource to wake
ROLE_SERVER = "server"
ANNOTATION_CHECKPOINT = f"{naming.GROUP}/checkpoint"  # on the pod template: what it serves
ANNOTATION_SPEC_HASH = f"{naming.GROUP}/spec-hash"  # on the Deployment: what it was built from
SERVER_CONTAINER = "server"
# Long enough for kube-proxy to drop a terminating pod from the Service before it stops
# accepting connections.
PRE_STOP_SECONDS = 5
# In-flight completions finish within this after SIGTERM.
GRACE_SECONDS = 60


def model_name(body: Mapping[str, Any]) -> str:
    spec = body.get("spec") or {}
    return str(spec.get("modelName") or body["metadata"]["name"])


def url_of(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return f"http://{meta['name']}.{meta['namespace']}.svc:{SERVE_PORT}/v1"


def _labels(body: Mapping[str, Any]) -> dict[str, str]:
    meta = body["metadata"]
    return {
        LABEL_SERVED_MODEL: meta["name"],
        LABEL_SERVED_MODEL_UID: meta["uid"],
        naming.LABEL_ROLE: ROLE_SERVER,
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
    }


def build_deployment(
    body: Mapping[str, Any], checkpoint_id: int, project: str, options: PodOptions
) -> dict[str, Any]:
    meta = body["metadata"]
    spec = body.get("spec") or {}
    gpus = int(spec.get("gpus", 0))
    env: list[dict[str, Any]] = [
        {"name": "CRUCIBLE_API_URL", "value": options.api_url},
        {"name": "CRUCIBLE_HOME", "value": WORKSPACE},
        {
            "name": "CRUCIBLE_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": options.token_secret, "key": "token"}},
        },
    ]
    container: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": spec.get("image") or options.default_image,
        "command": [
            "python",
            "-m",
            "crucible",
            "serve",
            str(checkpoint_id),
            "--project",
            project,
            "--host",
            "0.0.0.0",  # noqa: S104 - a pod's own address, reached through the Service
            "--port",
            str(SERVE_PORT),
            "--name",
            model_name(body),
            "--max-running",
            str(int(spec.get("maxRunning", 256))),
            "--crucible-tokens",
        ],
        "env": env,
        "ports": [{"name": "http", "containerPort": SERVE_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": SERVE_PORT},
            "periodSeconds": 2,
            "failureThreshold": 2,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "resources": resources_of(spec, gpus),
        "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}],
        "securityContext": container_security(),
    }
    volumes: list[dict[str, Any]] = [{"name": "workspace", "emptyDir": {}}]
    if options.storage_claim:
        # The checkpoints' file:// URIs are paths on the shared claim, as the runs wrote them.
        volumes.append(
            {"name": "storage", "persistentVolumeClaim": {"claimName": options.storage_claim}}
        )
        container["volumeMounts"].append(
            {"name": "storage", "mountPath": options.storage_path, "readOnly": True}
        )
    if options.storage_uri and options.storage_secret:
        container["envFrom"] = [{"secretRef": {"name": options.storage_secret}}]
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod_security(options),
        "containers": [container],
        "volumes": volumes,
        "tolerations": tolerations_of(spec, gpus, options),
    }
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    labels = _labels(body)
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels},
        "spec": {
            "replicas": int(spec.get("replicas", 1)),
            "selector": {"matchLabels": {LABEL_SERVED_MODEL: meta["name"]}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {ANNOTATION_CHECKPOINT: str(checkpoint_id)},
                },
                "spec": pod_spec,
            },
        },
    }
    deployment["metadata"]["annotations"] = {ANNOTATION_SPEC_HASH: spec_hash(deployment)}
    return deployment


def spec_hash(deployment: Mapping[str, Any]) -> str:
    """What a Deployment was built from, so an unchanged one is not written again."""
    text = json.dumps(deployment["spec"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_service(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": _labels(body)},
        "spec": {
            "selector": {LABEL_SERVED_MODEL: meta["name"]},
            "ports": [{"name": "http", "port": SERVE_PORT, "targetPort": SERVE_PORT}],
        },
    }
