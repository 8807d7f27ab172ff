"""ServedModels on the local cluster's kwok nodes, with the operator, the control plane and
the workers running as deployed (tests/k8s/operator_stack.py): the Deployment and Service
made, the status and the control plane saying which checkpoint is served, a promotion
rolled (by hand, and through the API and the workers), a run's latest checkpoint followed, a
reference that does not resolve explained, and a deletion forgotten. (The pods answering
completions on the real node: tests/k8s/test_real_node.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from crucible.workers import kubernetes
from tests.checkpoint_files import ROOT
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

pytestmark = [pytest.mark.k8s, pytest.mark.postgres, pytest.mark.redis]

SERVED_MODEL_LABEL = "crucible.dev/served-model"


def served_model(name: str, checkpoint: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "ServedModel",
        "metadata": {"name": name},
        # One GPU: the kwok nodes are GPU nodes, tainted so that only GPU pods go there.
        "spec": {
            "checkpoint": checkpoint,
            "replicas": replicas,
            "gpus": 1,
            "image": "registry.invalid/s:1",
        },
    }


def status_of(namespace: str, name: str) -> dict[str, Any]:
    found = h.kubectl("get", "servedmodel", name, "-o", "json", namespace=namespace, check=False)
    return (json.loads(found).get("status") or {}) if found else {}


def wait_serving(stack: Stack, namespace: str, name: str, checkpoint: int) -> dict[str, Any]:
    def served() -> dict[str, Any] | None:
        status = status_of(namespace, name)
        done = status.get("phase") == "Ready" and status.get("checkpoint", {}).get("id")
        return status if done == checkpoint else None

    found: dict[str, Any] = stack.wait_for(
        f"{name} Ready on checkpoint {checkpoint} (last: {status_of(namespace, name)})",
        served,
        seconds=90,
    )
    return found


def source_run(stack: Stack, namespace: str) -> dict[str, Any]:
    """A TrainingRun on a kwok node, to hang checkpoints on."""
    h.apply(
        {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": "src"},
            "spec": {"experiment": "serve", "image": "registry.invalid/train:1", "gpusPerNode": 1},
        },
        namespace=namespace,
    )
    run: dict[str, Any] = stack.wait_for(
        "the run src", lambda: stack.run_by_name(namespace, "src"), seconds=60
    )
    return run


def add_checkpoint(stack: Stack, run: dict[str, Any], step: int) -> int:
    checkpoint = stack.post(
        f"/runs/{run['id']}/checkpoints",
        {
            "step": step,
            "uri": (ROOT / "runs" / str(run["id"]) / f"step-{step}").as_uri(),
            "digest": "sha256:" + f"{step:x}".rjust(64, "0"),
            "size_bytes": 1,
        },
    )
    return int(checkpoint["id"])


def deployment_of(namespace: str, name: str) -> dict[str, Any] | None:
    found = h.kubectl("get", "deployment", name, "-o", "json", namespace=namespace, check=False)
    return json.loads(found) if found else None


def listed(stack: Stack, namespace: str) -> dict[str, dict[str, Any]]:
    items = stack.get("/deployments", project=namespace)["items"]
    return {d["name"]: d for d in items}


def test_a_served_checkpoint_is_a_deployment_and_service_and_a_promotion_rolls_it(
    stack: Stack, ns: str
) -> None:
    run = source_run(stack, ns)
    first, second = add_checkpoint(stack, run, 10), add_checkpoint(stack, run, 20)
    h.apply(served_model("arith", {"id": first}), namespace=ns)
    status = wait_serving(stack, ns, "arith", first)
    assert status["readyReplicas"] == 2
    assert status["checkpoint"] == {"id": first, "run": "src", "step": 10}
    assert status["url"] == f"http://arith.{ns}.svc:8000/v1"

    deployment = deployment_of(ns, "arith")
    assert deployment is not None
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "ServedModel"
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["crucible.dev/checkpoint"] == str(first)
    command = template["spec"]["containers"][0]["command"]
    assert command[4] == str(first) and "--crucible-tokens" in command
    service = h.kubectl_json("get", "service", "arith", namespace=ns)
    assert service["spec"]["selector"] == {SERVED_MODEL_LABEL: "arith"}
    assert service["spec"]["ports"][0]["port"] == 8000

    # The control plane lists it with the checkpoint it serves.
    api = stack.wait_for(
        "the deployment in the API",
        lambda: (found := listed(stack, ns).get("arith")) and found["phase"] == "Ready" and found,
    )
    assert api["backend"] == "kubernetes"
    assert api["serving_checkpoint_id"] == first
    assert (api["serving"]["run_name"], api["serving"]["step"]) == ("src", 10)
    assert (api["replicas"], api["ready_replicas"]) == (2, 2)

    # Promotion: a new checkpoint in the spec rolls the pods to it.
    h.kubectl(
        "patch",
        "servedmodel",
        "arith",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"checkpoint": {"id": second}}}),
        namespace=ns,
    )
    status = wait_serving(stack, ns, "arith", second)
    assert status["checkpoint"]["step"] == 20
    rolled = deployment_of(ns, "arith")
    assert rolled is not None
    assert rolled["spec"]["template"]["metadata"]["annotations"]["crucible.dev/checkpoint"] == (
        str(second)
    )
    assert rolled["metadata"]["generation"] == 2  # one roll, not one per pass
    stack.wait_for(
        "the API to show the promotion",
        lambda: listed(stack, ns)["arith"]["serving_checkpoint_id"] == second,
    )


def spec_checkpoint(namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = h.kubectl_json("get", "servedmodel", name, namespace=namespace)
    return dict(found["spec"]["checkpoint"])


def test_a_checkpoint_promoted_through_the_api_is_patched_in_and_rolled_to(
    stack: Stack, ns: str
) -> None:
    run = source_run(stack, ns)
    first, second = add_checkpoint(stack, run, 10), add_checkpoint(stack, run, 20)
    # It follows the run's latest: a promotion pins it, replacing the whole reference.
    h.apply(served_model("chat", {"run": "src", "checkpoint": "latest"}, 1), namespace=ns)
    wait_serving(stack, ns, "chat", second)
    deployment = stack.wait_for("the deployment in the API", lambda: listed(stack, ns).get("chat"))

    accepted = stack.post(f"/deployments/{deployment['id']}/promote", {"checkpoint_id": first})
    assert accepted == {
        "deployment_id": deployment["id"],
        "checkpoint_id": first,
        "namespace": ns,
        "name": "chat",
    }
    stack.wait_for(
        "the worker to patch spec.checkpoint",
        # (the CRD defaults `checkpoint: latest` in, which an id makes moot)
        lambda: spec_checkpoint(ns, "chat") == {"id": first, "checkpoint": "latest"},
        seconds=30,
    )
    status = wait_serving(stack, ns, "chat", first)
    assert status["wantedCheckpoint"]["id"] == first
    shown = stack.wait_for(
        "the API to show the promotion served",
        lambda: (d := listed(stack, ns)["chat"])["serving_checkpoint_id"] == first and d,
    )
    assert shown["checkpoint_id"] == first and shown["checkpoint"]["id"] == first
    assert shown["checkpoint"]["run"] is None
    # A newer checkpoint of the run no longer moves it.
    add_checkpoint(stack, run, 30)
    assert listed(stack, ns)["chat"]["checkpoint_id"] == first


def test_promoting_to_a_served_model_that_is_gone_is_reported_not_retried(
    cluster: h.Cluster, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler's own call, as the workers make it: a 404 says so and is acknowledged."""
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)
    kubernetes._client.cache_clear()
    try:
        outcome = kubernetes.serve_checkpoint(ns, "never-applied", 7)
    finally:
        kubernetes._client.cache_clear()
    assert outcome == f"ServedModel {ns}/never-applied is gone; nothing to promote"


def test_a_run_named_as_latest_is_followed_to_its_newer_checkpoints(stack: Stack, ns: str) -> None:
    run = source_run(stack, ns)
    first = add_checkpoint(stack, run, 10)
    h.apply(served_model("follow", {"run": "src", "checkpoint": "latest"}, 1), namespace=ns)
    wait_serving(stack, ns, "follow", first)
    newer = add_checkpoint(stack, run, 20)
    status = wait_serving(stack, ns, "follow", newer)
    assert status["wantedCheckpoint"]["id"] == newer


def test_a_reference_that_does_not_resolve_says_why_and_creates_nothing(
    stack: Stack, ns: str
) -> None:
    h.apply(served_model("nowhere", {"id": 987654321}), namespace=ns)

    def explained() -> dict[str, Any] | None:
        status = status_of(ns, "nowhere")
        return status if status.get("message") else None

    status = stack.wait_for("a message on nowhere", explained, seconds=60)
    assert status["phase"] == "Pending"
    assert "987654321" in status["message"], status
    assert deployment_of(ns, "nowhere") is None
    assert listed(stack, ns)["nowhere"]["resolve_error"]


def test_a_deleted_served_model_leaves_no_deployment_and_is_forgotten(
    stack: Stack, ns: str
) -> None:
    run = source_run(stack, ns)
    first = add_checkpoint(stack, run, 10)
    h.apply(served_model("gone", {"id": first}, 1), namespace=ns)
    wait_serving(stack, ns, "gone", first)
    assert "gone" in listed(stack, ns)
    h.kubectl("delete", "servedmodel", "gone", "--timeout=60s", namespace=ns)
    stack.wait_for("the API to forget it", lambda: "gone" not in listed(stack, ns), seconds=30)
    stack.wait_for(
        "the Deployment collected", lambda: deployment_of(ns, "gone") is None, seconds=60
    )
