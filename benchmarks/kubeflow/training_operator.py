"""Kubeflow's training operator v1 as a process against the local cluster: built by
benchmarks/kubeflow/build.sh, PyTorchJob only, leader election off, webhooks off.

Webhooks off: the binary always runs its cert rotator and webhook server, but nothing
calls them unless a ValidatingWebhookConfiguration points at them, and none is created.
The rotator only needs its Secret to exist (it fills it with a self-signed CA) and goes
ready without the webhook configuration ("Webhook not found" is logged and skipped). In a
cluster the kubelet mounts that Secret where the webhook server reads its certificate;
here `KubeflowOperator.start` copies it there (a fixed path in the binary).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Process
from tests.servers import free_port

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
NAMESPACE = "kubeflow-bench"  # where the operator keeps its (unused) webhook Secret
SECRET = "training-operator-webhook-cert"
VERSION = os.environ.get("KUBEFLOW_TRAINING_OPERATOR_VERSION", "v1.8.1")
JOB_LABEL = "training.kubeflow.org/job-name"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert in the module


def build(*args: str) -> str:
    """The binary's path (or with `--crds` its CRD folder), building it on first use."""
    proc = subprocess.run([str(BUILD_SCRIPT), *args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout.strip()


def install() -> None:
    """The PyTorchJob CRD, and the namespace and Secret the cert rotator needs."""
    crd = Path(build("--crds")) / "kubeflow.org_pytorchjobs.yaml"
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd), timeout=120)
    # right after the apply the CRD may have no status yet, and kubectl wait fails at once
    established = ("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org")
    h.wait_for(
        lambda: h.kubectl_result(*established, "--timeout=10s").returncode == 0,
        timeout=120,
        message="the PyTorchJob CRD to be established",
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}}
    h.apply(namespace)
    if not h.kubectl("get", "secret", SECRET, "-o", "name", namespace=NAMESPACE, check=False):
        h.create(secret, namespace=NAMESPACE)


def mount_certificate() -> None:
    """Do the kubelet's part: the webhook Secret's files in the certificate folder, once
    the cert rotator has filled it."""
    if (CERT_DIR / "tls.key").exists():
        return
    secret = h.kubectl_json("get", "secret", SECRET, namespace=NAMESPACE)
    data = secret.get("data") or {}
    if "tls.crt" in data and "tls.key" in data:
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.crt", "tls.key"):
            if name in data:
                (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))


def pytorch_job(
    name: str, workers: int, gpus_per_pod: int, restart_policy: str = "OnFailure"
) -> dict[str, Any]:
    """One master plus `workers` workers of `gpus_per_pod` GPUs each, on the fake nodes."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "registry.invalid/bench:1",
                    "resources": {"limits": {h.GPU: str(gpus_per_pod)}},
                }
            ],
            "tolerations": [{"key": h.GPU, "operator": "Exists"}],
        }
    }
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": restart_policy, "template": template}
    }
    if workers:
        replicas["Worker"] = {
            "replicas": workers,
            "restartPolicy": restart_policy,
            "template": template,
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"runPolicy": {"backoffLimit": 1000}, "pytorchReplicaSpecs": replicas},
    }


class KubeflowOperator(Process):
    """`training-operator --enable-scheme=pytorchjob` in its own process group."""

    def __init__(self, kubeconfig: str, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        env |= {"KUBECONFIG": kubeconfig, "MY_POD_NAMESPACE": NAMESPACE}
        self.probe_port = free_port()
        flags = [
            "--enable-scheme=pytorchjob",
            "--leader-elect=false",
            "--gang-scheduler-name=",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--webhook-server-port={free_port()}",
        ]
        super().__init__("training-operator", flags, env, log, program=[build()])

    def start(self, timeout: float = 120) -> None:
        logged = self.log.stat().st_size if self.log.exists() else 0
        super().start()
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while not self.ready():
            mount_certificate()
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"training-operator exited {self.process.returncode}\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"training-operator not ready after {timeout}s\n{self.tail()}")
            time.sleep(0.3)
        # readyz means certificates and webhook server; the controller registers right after
        while "Starting workers" not in self.log.read_text()[logged:]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"training-operator's controller did not start\n{self.tail()}")
            time.sleep(0.3)

    def ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.probe_port}/readyz"
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def versions() -> dict[str, Any]:
    return {"kubeflow_training_operator": VERSION}
