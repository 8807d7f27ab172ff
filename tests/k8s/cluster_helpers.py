"""Helpers for tests against the local Kubernetes cluster (scripts/cluster).

Everything goes through the real API server with ``kubectl`` (subprocess); nothing is
mocked. Pods on the fake GPU nodes are driven by the kwok Stage rules in
scripts/cluster.d/kwok-stages.yaml:

* a pod bound to a fake node goes Pending -> Running by itself;
* :func:`finish_pod` (annotation ``crucible.dev/fake-exit-code``) makes it Succeeded
  (0) or Failed (any other code) with that exit code in every container status;
* :func:`evict_pod` (Eviction API) and :func:`disrupt_pod` (status patch as the
  scheduler does on preemption) give it a ``DisruptionTarget`` condition and delete it;
  the fake kubelet then stops it with exit code 143 and phase Failed;
* :func:`lose_node` makes a node NotReady (or Unknown) and optionally deletes it, after
  which the pod garbage collector removes its pods.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO_ROOT / "scripts" / "cluster"
VERSIONS_FILE = REPO_ROOT / "scripts" / "cluster.d" / "versions.env"

# Annotations understood by the kwok stages.
FAKE_EXIT_CODE = "crucible.dev/fake-exit-code"
FAKE_EXIT_REASON = "crucible.dev/fake-exit-reason"
FAKE_RUN_DURATION = "crucible.dev/fake-run-duration"
FAKE_START_DELAY = "crucible.dev/fake-start-delay"
FAKE_NODE_CONDITION = "crucible.dev/fake-node-condition"

GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
FAKE_NODE_LABEL = "crucible.dev/fake-node"

T = TypeVar("T")


class KubectlError(RuntimeError):
    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str):
        self.args_ = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(
            f"kubectl {shlex.join(args)} exited {returncode}: {stderr.strip() or stdout.strip()}"
        )


def read_versions() -> dict[str, str]:
    """The pinned versions from scripts/cluster.d/versions.env."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


@dataclass
class Cluster:
    """A running local cluster: what ``eval "$(scripts/cluster up)"`` exports."""

    kubeconfig: str
    bin_dir: str
    host_ip: str | None = None  # where the real node's pods reach this machine; None: no node

    @property
    def kubectl_path(self) -> str:
        return os.path.join(self.bin_dir, "kubectl")

    @property
    def helm_path(self) -> str:
        return os.path.join(self.bin_dir, "helm")

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = self.kubeconfig
        env["PATH"] = self.bin_dir + os.pathsep + env.get("PATH", "")
        return env


def _parse_exports(text: str) -> dict[str, str]:
    exports: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        # the script writes shell-quoted values; PATH ends in :"$PATH"
        key, _, value = line[len("export ") :].partition("=")
        exports[key] = value
    return exports


def cluster_command(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CLUSTER_SCRIPT), *args],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cluster_up(nodes: int | None = None, timeout: float = 3600) -> Cluster:
    """Run ``scripts/cluster up`` (builds on first use, reuses a healthy cluster)."""
    args = ["up"] + (["--nodes", str(nodes)] if nodes is not None else [])
    proc = cluster_command(*args, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"scripts/cluster up exited {proc.returncode}\n--- stderr (tail) ---\n"
            + "\n".join(proc.stderr.splitlines()[-40:])
        )
    exports = _parse_exports(proc.stdout)
    try:
        kubeconfig = shlex.split(exports["KUBECONFIG"])[0]
        path_value = exports["PATH"]
        bin_dir = shlex.split(path_value.split(':"$PATH"')[0])[0]
    except (KeyError, IndexError) as exc:
        raise RuntimeError(f"unexpected output from scripts/cluster up: {proc.stdout!r}") from exc
    host_ip = exports.get("CRUCIBLE_CLUSTER_HOST_IP")
    return Cluster(
        kubeconfig=kubeconfig,
        bin_dir=bin_dir,
        host_ip=shlex.split(host_ip)[0] if host_ip else None,
    )


# --- kubectl ---------------------------------------------------------------------------


def kubectl(
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 60,
    namespace: str | None = None,
) -> str:
    """Run kubectl (from PATH, set by the ``cluster`` fixture) and return stdout."""
    argv = list(args)
    if namespace:
        argv = ["-n", namespace, *argv]
    proc = subprocess.run(
        ["kubectl", *argv],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise KubectlError(argv, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def helm(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run helm (from PATH, like kubectl); fail with its stderr unless `check` is False."""
    proc = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def kubectl_result(
    *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run kubectl and return the CompletedProcess (for tests of failures)."""
    return subprocess.run(
        ["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout
    )


def kubectl_json(*args: str, namespace: str | None = None, timeout: float = 60) -> Any:
    return json.loads(kubectl(*args, "-o", "json", namespace=namespace, timeout=timeout))


def apply(*objects: dict, namespace: str | None = None) -> None:
    """``kubectl apply`` the given objects (dicts)."""
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    kubectl("apply", "-f", "-", input=json.dumps(doc), namespace=namespace)


def create(*objects: dict, namespace: str | None = None) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    kubectl("create", "-f", "-", input=json.dumps(doc), namespace=namespace)


def wait_for(
    fn: Callable[[], T | None],
    timeout: float = 30,
    interval: float = 0.25,
    message: str = "condition",
) -> T:
    """Call ``fn`` until it returns something truthy; fail with ``message`` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")
        time.sleep(interval)


def unique_name(prefix: str) -> str:
    prefix = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:40] or "x"
    return f"{prefix}-{secrets.token_hex(3)}"


# --- namespaces ------------------------------------------------------------------------


def create_namespace(prefix: str = "t", labels: dict[str, str] | None = None) -> str:
    name = unique_name(prefix)
    create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"crucible.dev/test": "true", **(labels or {})}},
        }
    )
    # The ServiceAccount admission plugin rejects pods until the serviceaccount
    # controller has made the namespace's "default" ServiceAccount.
    wait_for(
        lambda: kubectl("get", "serviceaccount", "default", namespace=name, check=False).strip(),
        timeout=30,
        message=f"default ServiceAccount in {name}",
    )
    return name


def delete_namespace(name: str, wait: bool = False) -> None:
    kubectl(
        "delete",
        "namespace",
        name,
        "--ignore-not-found",
        f"--wait={str(wait).lower()}",
        check=False,
    )


# --- pods ------------------------------------------------------------------------------


def make_pod(
    name: str,
    *,
    gpus: int = 0,
    tolerate_gpu: bool = True,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    node_selector: dict[str, str] | None = None,
    finalizers: Iterable[str] = (),
    owner: dict | None = None,
    restart_policy: str = "Never",
    cpu: str = "100m",
    memory: str = "128Mi",
    image: str = "registry.invalid/crucible/fake:latest",
) -> dict:
    """A pod manifest for the fake GPU nodes (the image is never pulled: kwok runs it)."""
    resources: dict[str, dict[str, Any]] = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {},
    }
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"][GPU] = str(gpus)
    if not resources["limits"]:
        del resources["limits"]
    meta: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    if owner:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 5,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": image, "resources": resources}],
    }
    if tolerate_gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def get_pod(namespace: str, name: str) -> dict | None:
    proc = kubectl_result("get", "pod", name, "-n", namespace, "-o", "json")
    if proc.returncode != 0:
        if "NotFound" in proc.stderr or "not found" in proc.stderr:
            return None
        raise KubectlError(["get", "pod", name], proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def pod_condition(pod: dict, ctype: str) -> dict | None:
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == ctype:
            return cond
    return None


def container_exit_codes(pod: dict) -> list[int]:
    codes = []
    for cs in pod.get("status", {}).get("containerStatuses", []) or []:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            codes.append(int(term["exitCode"]))
    return codes


def wait_pod(
    namespace: str,
    name: str,
    predicate: Callable[[dict], bool],
    timeout: float = 30,
    message: str = "",
) -> dict:
    def probe() -> dict | None:
        pod = get_pod(namespace, name)
        return pod if pod is not None and predicate(pod) else None

    return wait_for(probe, timeout=timeout, message=message or f"pod {namespace}/{name}")


def wait_pod_phase(namespace: str, name: str, *phases: str, timeout: float = 30) -> dict:
    return wait_pod(
        namespace,
        name,
        lambda p: p.get("status", {}).get("phase") in phases,
        timeout=timeout,
        message=f"pod {namespace}/{name} phase in {phases}",
    )


def wait_pod_gone(namespace: str, name: str, timeout: float = 60) -> None:
    wait_for(
        lambda: get_pod(namespace, name) is None,
        timeout=timeout,
        interval=0.5,
        message=f"pod {namespace}/{name} to be deleted",
    )


def finish_pod(
    namespace: str,
    name: str,
    exit_code: int = 0,
    *,
    reason: str | None = None,
    after: str | None = None,
    wait: bool = True,
    timeout: float = 30,
) -> dict | None:
    """Make a Running pod's containers exit with ``exit_code`` (0 -> Succeeded, else Failed).

    ``reason`` sets the terminated reason (e.g. ``OOMKilled``); ``after`` is a Go
    duration (``"2s"``) the fake container keeps running first. The same annotations on
    a pod (template) at creation make it run and then exit by itself.
    """
    ann = [f"{FAKE_EXIT_CODE}={int(exit_code)}"]
    if reason:
        ann.append(f"{FAKE_EXIT_REASON}={reason}")
    if after:
        ann.append(f"{FAKE_RUN_DURATION}={after}")
    kubectl("annotate", "pod", name, "--overwrite", *ann, namespace=namespace)
    if not wait:
        return None
    return wait_pod_phase(
        namespace, name, "Succeeded" if exit_code == 0 else "Failed", timeout=timeout
    )


def evict_pod(namespace: str, name: str) -> None:
    """Evict through the Eviction API (as ``kubectl drain`` does): the API server adds a
    DisruptionTarget condition (reason EvictionByEvictionAPI) and deletes the pod."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
        "-f",
        "-",
        input=json.dumps(body),
    )


def disrupt_pod(
    namespace: str,
    name: str,
    reason: str = "PreemptionByScheduler",
    message: str = "crucible test: preempted",
    delete: bool = True,
) -> None:
    """Add a DisruptionTarget condition and delete the pod, as kube-scheduler does when it
    preempts a victim (reason ``PreemptionByScheduler``) or the taint manager on eviction
    (``DeletionByTaintManager``)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                }
            ]
        }
    }
    kubectl(
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps(patch),
        namespace=namespace,
    )
    if delete:
        kubectl("delete", "pod", name, "--wait=false", namespace=namespace)


def remove_finalizers(namespace: str, name: str) -> None:
    kubectl(
        "patch",
        "pod",
        name,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
        namespace=namespace,
        check=False,
    )


# --- nodes -----------------------------------------------------------------------------


def fake_nodes() -> list[dict]:
    return kubectl_json("get", "nodes", "-l", f"{FAKE_NODE_LABEL}=true")["items"]


def node_ready_status(name: str) -> str | None:
    proc = kubectl_result("get", "node", name, "-o", "json")
    if proc.returncode != 0:
        return None
    for cond in json.loads(proc.stdout).get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return cond.get("status")
    return None


def add_fake_node(
    name: str | None = None,
    *,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    taint_gpu: bool = True,
    wait: bool = True,
) -> str:
    """Create an extra kwok-managed GPU node (for tests that break or delete a node;
    leave the shared kwok-gpu-N nodes alone). Returns its name."""
    name = name or unique_name("kwok-test")
    res = {
        "cpu": "192",
        "memory": "2Ti",
        "ephemeral-storage": "30Ti",
        "pods": "110",
        GPU: str(gpus),
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "crucible.dev/test-node": "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": "NVIDIA-H200",
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {
            "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
            if taint_gpu
            else []
        },
        "status": {"capacity": res, "allocatable": res},
    }
    create(node)
    if wait:
        wait_for(
            lambda: node_ready_status(name) == "True", timeout=30, message=f"node {name} Ready"
        )
    return name


def lose_node(
    name: str, condition: str = "NotReady", *, delete: bool = False, wait: bool = True
) -> None:
    """Make a fake node's Ready condition False (``NotReady``) or ``Unknown`` (kwok stage
    ``crucible-node-lost``); with ``delete`` then delete the Node object, after which the
    pod garbage collector removes the pods bound to it (within about a minute)."""
    if condition not in ("NotReady", "Unknown"):
        raise ValueError("condition must be NotReady or Unknown")
    kubectl("annotate", "node", name, "--overwrite", f"{FAKE_NODE_CONDITION}={condition}")
    if wait:
        want = "Unknown" if condition == "Unknown" else "False"
        wait_for(
            lambda: node_ready_status(name) == want, timeout=30, message=f"node {name} Ready={want}"
        )
    if delete:
        delete_node(name)


def restore_node(name: str, wait: bool = True) -> None:
    kubectl("annotate", "node", name, f"{FAKE_NODE_CONDITION}-")
    if wait:
        wait_for(
            lambda: node_ready_status(name) == "True", timeout=30, message=f"node {name} Ready"
        )


def delete_node(name: str) -> None:
    kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
