"""The local cluster is a real Kubernetes control plane: scheduler, controllers, garbage
collection, CRDs with CEL validation, OpenAPI, and kwok fake GPU nodes."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field

import pytest

from tests.k8s import cluster_helpers as h

pytestmark = pytest.mark.k8s


# --- node loss, started first: the pod GC needs ~40-80 s after a node is deleted --------


@dataclass
class LostNodeScenario:
    namespace: str = ""
    node: str = ""
    pod: str = "on-doomed-node"
    not_ready_seen: bool = False
    deleted_at: float = 0.0
    error: BaseException | None = None
    notes: list[str] = field(default_factory=list)


@pytest.fixture(scope="module", autouse=True)
def lost_node(cluster: h.Cluster):
    """Before the other tests: a pod on an extra fake node, the node goes NotReady and is
    deleted. ``test_deleting_a_node_removes_its_pods`` (last) checks the pod GC result;
    the wait overlaps the other tests. Errors are kept for that test, not raised here."""
    s = LostNodeScenario()
    try:
        s.namespace = h.create_namespace("lost-node")
        s.node = h.add_fake_node()
        h.create(
            h.make_pod(s.pod, gpus=1, node_selector={"kubernetes.io/hostname": s.node}),
            namespace=s.namespace,
        )
        pod = h.wait_pod_phase(s.namespace, s.pod, "Running", timeout=30)
        assert pod["spec"]["nodeName"] == s.node
        h.lose_node(s.node, "NotReady")
        s.not_ready_seen = h.node_ready_status(s.node) == "False"
        h.delete_node(s.node)
        s.deleted_at = time.monotonic()
    except BaseException as exc:
        s.error = exc
    yield s
    if s.node:
        h.delete_node(s.node)
    if s.namespace:
        h.delete_namespace(s.namespace)


# --- scheduling on fake GPU nodes ------------------------------------------------------


def test_fake_gpu_nodes_are_ready(cluster):
    nodes = h.fake_nodes()
    assert len(nodes) >= 4
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert labels["type"] == "kwok"
        assert node["status"]["allocatable"][h.GPU] == "8"
        assert {"key": h.GPU, "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]
        assert h.node_ready_status(node["metadata"]["name"]) == "True"


def test_pod_with_two_gpus_is_bound_to_a_fake_node_and_runs(namespace):
    h.create(h.make_pod("train", gpus=2), namespace=namespace)
    pod = h.wait_pod_phase(namespace, "train", "Running", timeout=30)
    node_name = pod["spec"]["nodeName"]
    node = h.kubectl_json("get", "node", node_name)
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert int(node["status"]["allocatable"][h.GPU]) >= 2
    assert h.pod_condition(pod, "PodScheduled")["status"] == "True"
    assert h.pod_condition(pod, "Ready")["status"] == "True"
    assert pod["status"]["podIP"]
    assert pod["status"]["containerStatuses"][0]["state"]["running"]


def test_pod_with_nine_gpus_is_unschedulable(namespace):
    h.create(h.make_pod("too-big", gpus=9), namespace=namespace)
    pod = h.wait_pod(
        namespace,
        "too-big",
        lambda p: (h.pod_condition(p, "PodScheduled") or {}).get("status") == "False",
        timeout=30,
        message="PodScheduled=False",
    )
    cond = h.pod_condition(pod, "PodScheduled")
    assert cond["reason"] == "Unschedulable"
    assert "nvidia.com/gpu" in cond["message"]
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


def test_pod_without_gpu_toleration_is_not_scheduled(namespace):
    h.create(h.make_pod("no-toleration", tolerate_gpu=False), namespace=namespace)
    pod = h.wait_pod(
        namespace,
        "no-toleration",
        lambda p: (h.pod_condition(p, "PodScheduled") or {}).get("status") == "False",
        timeout=30,
        message="PodScheduled=False",
    )
    assert "untolerated taint" in h.pod_condition(pod, "PodScheduled")["message"]


# --- pod outcomes through the kwok stages ----------------------------------------------


def test_pod_fails_with_exit_code_3(namespace):
    h.create(h.make_pod("crash", gpus=1, annotations={h.FAKE_EXIT_CODE: "3"}), namespace=namespace)
    pod = h.wait_pod_phase(namespace, "crash", "Failed", timeout=30)
    assert h.container_exit_codes(pod) == [3]
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "Error"


def test_running_pod_succeeds_and_oom_reason(namespace):
    h.create(h.make_pod("ok"), h.make_pod("oom"), namespace=namespace)
    h.wait_pod_phase(namespace, "ok", "Running")
    h.wait_pod_phase(namespace, "oom", "Running")
    pod = h.finish_pod(namespace, "ok", 0)
    assert h.container_exit_codes(pod) == [0]
    pod = h.finish_pod(namespace, "oom", 137, reason="OOMKilled")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"


def test_eviction_sets_disruption_target(namespace):
    # a finalizer holds the pod so the terminal state can be inspected before removal
    h.create(
        h.make_pod("victim", gpus=1, finalizers=["crucible.dev/test-hold"]), namespace=namespace
    )
    h.wait_pod_phase(namespace, "victim", "Running")
    h.evict_pod(namespace, "victim")
    pod = h.wait_pod_phase(namespace, "victim", "Failed")
    cond = h.pod_condition(pod, "DisruptionTarget")
    assert cond and cond["status"] == "True" and cond["reason"] == "EvictionByEvictionAPI"
    assert pod["metadata"].get("deletionTimestamp")
    assert h.container_exit_codes(pod) == [143]
    h.remove_finalizers(namespace, "victim")
    h.wait_pod_gone(namespace, "victim", timeout=30)


def test_preemption_style_disruption(namespace):
    h.create(h.make_pod("preempted", finalizers=["crucible.dev/test-hold"]), namespace=namespace)
    h.wait_pod_phase(namespace, "preempted", "Running")
    h.disrupt_pod(namespace, "preempted", reason="PreemptionByScheduler")
    pod = h.wait_pod_phase(namespace, "preempted", "Failed")
    assert h.pod_condition(pod, "DisruptionTarget")["reason"] == "PreemptionByScheduler"
    h.remove_finalizers(namespace, "preempted")
    h.wait_pod_gone(namespace, "preempted", timeout=30)


def test_node_condition_can_be_broken_and_restored(cluster):
    node = h.add_fake_node()
    try:
        h.lose_node(node, "Unknown")
        assert h.node_ready_status(node) == "Unknown"
        h.restore_node(node)
        assert h.node_ready_status(node) == "True"
    finally:
        h.delete_node(node)


# --- garbage collection ----------------------------------------------------------------


def test_deleting_an_owner_cascades_to_its_pods(namespace):
    h.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owner"},
            "data": {"a": "b"},
        },
        namespace=namespace,
    )
    uid = h.kubectl_json("get", "configmap", "owner", namespace=namespace)["metadata"]["uid"]
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": uid,
        "blockOwnerDeletion": True,
    }
    h.create(
        h.make_pod("child-running", owner=owner),
        h.make_pod("child-pending", owner=owner, tolerate_gpu=False),
        namespace=namespace,
    )
    h.wait_pod_phase(namespace, "child-running", "Running")
    h.kubectl("delete", "configmap", "owner", "--cascade=background", namespace=namespace)
    h.wait_pod_gone(namespace, "child-running", timeout=30)
    h.wait_pod_gone(namespace, "child-pending", timeout=30)


# --- API machinery: CRD with CEL validation, OpenAPI/explain -------------------------------


def _crd(suffix: str, group: str) -> dict:
    plural, kind = f"widget{suffix}s", f"Widget{suffix.capitalize()}"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": plural[:-1],
                "kind": kind,
                "listKind": kind + "List",
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A widget for testing CRD validation.",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "description": "Desired state of the widget.",
                                    "properties": {
                                        "replicas": {
                                            "type": "integer",
                                            "minimum": 0,
                                            "description": "How many widget replicas to run now.",
                                        },
                                        "maxReplicas": {
                                            "type": "integer",
                                            "minimum": 1,
                                            "description": "The most widget replicas ever allowed.",
                                        },
                                    },
                                    "required": ["replicas", "maxReplicas"],
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self.replicas <= self.maxReplicas",
                                            "message": "replicas must not exceed maxReplicas",
                                        }
                                    ],
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def widget_crd(cluster):
    suffix = h.unique_name("w").split("-")[-1]
    group = "test.crucible.dev"
    crd = _crd(suffix, group)
    plural = crd["spec"]["names"]["plural"]
    h.create(crd)
    h.kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}", "--timeout=30s")
    yield plural, group, crd["spec"]["names"]["kind"]
    h.kubectl("delete", "crd", f"{plural}.{group}", "--wait=false", check=False)


def test_crd_cel_rule_rejects_bad_object(namespace, widget_crd):
    _plural, group, kind = widget_crd
    good = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": kind,
        "metadata": {"name": "good"},
        "spec": {"replicas": 2, "maxReplicas": 4},
    }
    bad = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": kind,
        "metadata": {"name": "bad"},
        "spec": {"replicas": 5, "maxReplicas": 4},
    }
    # the discovery of a fresh CRD can lag a moment behind Established
    h.wait_for(
        lambda: (
            h.kubectl_result(
                "create", "-n", namespace, "-f", "-", input=json.dumps(good)
            ).returncode
            == 0
        ),
        timeout=30,
        message="creating a valid custom object",
    )
    proc = h.kubectl_result("create", "-n", namespace, "-f", "-", input=json.dumps(bad))
    assert proc.returncode != 0
    assert "replicas must not exceed maxReplicas" in proc.stderr
    assert "Invalid value" in proc.stderr


def test_kubectl_explain_shows_crd_field_descriptions(widget_crd):
    plural, group, _ = widget_crd

    def explain() -> str | None:
        proc = h.kubectl_result("explain", f"{plural}.spec", f"--api-version={group}/v1alpha1")
        return (
            proc.stdout
            if proc.returncode == 0 and "How many widget replicas" in proc.stdout
            else None
        )

    out = h.wait_for(
        explain, timeout=45, interval=1, message="kubectl explain to show the CRD schema"
    )
    assert "The most widget replicas ever allowed." in out
    assert "Desired state of the widget." in out


# --- versions ------------------------------------------------------------------------------


def test_kubectl_and_server_report_the_stamped_version(cluster):
    versions = h.read_versions()
    out = json.loads(h.kubectl("version", "-o", "json"))
    for side in ("clientVersion", "serverVersion"):
        v = out[side]
        assert v["gitVersion"] == versions["K8S_VERSION"], v
        assert v["major"] == "1"
        assert v["minor"] == versions["K8S_VERSION"].split(".")[1]
        assert v["gitTreeState"] == "clean"
        assert v["buildDate"] != "1970-01-01T00:00:00Z"


def test_helm_reports_the_stamped_version(cluster):
    versions = h.read_versions()
    out = subprocess.run(
        ["helm", "version", "--template", "{{.Version}} {{.GitCommit}}"],
        capture_output=True,
        text=True,
        check=True,
        env=cluster.env(),
    ).stdout
    version, commit = out.split()
    assert version == versions["HELM_VERSION"]
    assert commit == versions["HELM_GIT_COMMIT"]


def test_etcd_and_kwok_are_the_pinned_versions(cluster):
    versions = h.read_versions()
    etcd = subprocess.run(
        [f"{cluster.bin_dir}/etcd", "--version"], capture_output=True, text=True
    ).stdout
    assert f"etcd Version: {versions['ETCD_VERSION'].lstrip('v')}" in etcd
    kwok = subprocess.run([f"{cluster.bin_dir}/kwok", "--version"], capture_output=True, text=True)
    assert versions["KWOK_VERSION"].lstrip("v") in kwok.stdout + kwok.stderr


# --- last: the node deleted at module start -------------------------------------------------


def test_deleting_a_node_removes_its_pods(lost_node):
    s = lost_node
    if s.error is not None:
        raise s.error
    assert s.not_ready_seen, "the fake node never reported Ready=False"
    assert h.kubectl_result("get", "node", s.node).returncode != 0, "node still exists"
    # pod GC: orphaned pods are removed after a 40 s quarantine (checked every 20 s)
    remaining = max(5.0, 100 - (time.monotonic() - s.deleted_at))
    h.wait_pod_gone(s.namespace, s.pod, timeout=remaining)
