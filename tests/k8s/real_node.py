"""The test cluster's real node, for tests and benchmarks: how to put pods there, the
workload image of this tree, a shared volume in a namespace, and the stack (API, workers,
operator) whose pods run there."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

from crucible.client import ApiError, CrucibleClient
from crucible.demo.loop import QUICK, loop_manifests
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import ControlPlane, Stack
from tests.object_store import ObjectStore

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "helm" / "crucible" / "crds"
REAL_NODE = "crucible-node-0"
REAL_NODE_LABEL = "crucible.dev/real-node"
# Only pods that tolerate the node's taint and select it land there.
ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {REAL_NODE_LABEL: "true"},
    "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}
CLAIM = "crucible-storage"
TOOL_SECCOMP_PROFILE = "crucible/tool-sandbox.json"
"""The tool sandbox's seccomp profile, where scripts/cluster.d/node.sh installs it."""


def load_images(env: dict[str, str], which: str) -> dict[str, str]:
    """`scripts/images load WHICH`: the images built from this tree (cached by content) and
    in the node's containerd, by the names it exports (CRUCIBLE_<NAME>_IMAGE -> NAME)."""
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "images"), "load", which],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    images = {}
    for line in proc.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        if name.startswith("CRUCIBLE_") and name.endswith("_IMAGE"):
            images[name.removeprefix("CRUCIBLE_").removesuffix("_IMAGE")] = shlex.split(value)[0]
    assert images, f"scripts/images printed no image: {proc.stdout!r}"
    return images


def load_workload_image(env: dict[str, str]) -> str:
    """The workload image of this tree in the node's containerd."""
    return load_images(env, "workload")["WORKLOAD"]


def install_crds() -> None:
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
    for plural in ("trainingruns", "rolloutjobs", "evaljobs"):
        h.kubectl("wait", "--for=condition=Established", f"crd/{plural}.crucible.dev")


def stack_on_real_node(
    workdir: Path,
    kube_env: dict[str, str],
    *,
    host_ip: str,
    image: str,
    storage: tuple[str, ...],
    suffix: str = "realnode",
    broker_database: int = 9,
) -> Stack:
    """API, workers and operator whose pods run the workload image, with the operator's
    `storage` arguments (`claim_storage`, or --storage-uri and --storage-secret); not
    started."""
    return Stack(
        workdir,
        kube_env,
        suffix=suffix,
        broker_database=broker_database,
        host=host_ip,
        operator_args=(
            "--default-image",
            image,
            *storage,
            "--grace-seconds",
            "60",
            # Every workload pod goes to the real node, so manifests apply as written.
            "--workload-node-selector",
            f"{REAL_NODE_LABEL}=true",
            "--workload-toleration",
            REAL_NODE_LABEL,
            # The agents' tools cut their network with a namespace, which the runtime's
            # default seccomp profile refuses (scripts/cluster.d/seccomp).
            "--workload-seccomp-profile",
            TOOL_SECCOMP_PROFILE,
        ),
    )


def enforce_restricted(namespace: str) -> None:
    """Have the API server's PodSecurity admission refuse any pod of `namespace` that breaks
    the `restricted` standard, as a hardened cluster's project namespaces do."""
    h.kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
        "--overwrite",
    )


def claim_storage(shared_dir: Path) -> tuple[str, ...]:
    """The operator's arguments for the claim CLAIM, mounted at `shared_dir`."""
    return ("--storage-claim", CLAIM, "--storage-path", str(shared_dir))


S3_SECRET = "crucible-s3"


def object_storage(store: ObjectStore, prefix: str) -> tuple[str, ...]:
    """The operator's arguments for checkpoints and outputs under `prefix` of the store, the
    keys in the Secret S3_SECRET (`add_s3_secret`)."""
    assert prefix.startswith(f"s3://{store.bucket}/"), prefix
    return ("--storage-uri", prefix, "--storage-secret", S3_SECRET)


def add_s3_secret(namespace: str, store: ObjectStore) -> None:
    """The Secret pods of `namespace` take the store's address and keys from."""
    h.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": S3_SECRET},
            "type": "Opaque",
            "stringData": store.client_env,
        },
        namespace=namespace,
    )


def add_shared_storage(namespace: str, shared_dir: Path) -> str:
    """The claim CLAIM in `namespace`, bound to a hostPath PersistentVolume on `shared_dir`
    (the pods mount it at that same path). Returns the volume's name."""
    volume = f"{namespace}-storage"
    h.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(shared_dir), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        }
    )
    h.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
        namespace=namespace,
    )
    return volume


def teacher(namespace: str, prefix: str) -> dict[str, Any]:
    """The CI-sized loop's teacher, `<prefix>-teacher`, publishing `<prefix>-sft-data`."""
    (manifest, *_) = loop_manifests(prefix, QUICK)
    manifest["metadata"].update(name=f"{prefix}-teacher", namespace=namespace)
    manifest["spec"]["scheduling"] = ON_REAL_NODE
    return manifest


def sft_run(namespace: str, name: str, data_from: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "experiment": "real-node",
            "inputs": [{"producedBy": data_from}],
            "config": {
                "model": {"preset": "tiny"},
                "task": {"digits": 1, "operators": ["+"]},
                "train": {"mode": "sft", "lr": 3e-3, "batch_size": 32, "warmup_steps": 20},
            },
            "scheduling": ON_REAL_NODE,
            **spec,
        },
    }


def wait_runs(
    stack: ControlPlane, namespace: str, names: list[str], seconds: float
) -> dict[str, Any]:
    """The named runs once all are terminal (any phase), by name."""
    with CrucibleClient(stack.url, stack.token) as api:

        def terminal() -> dict[str, Any] | None:
            try:
                runs = {r.name: r for r in api.list_runs(project=namespace, limit=100).items}
            except ApiError as exc:
                if exc.status != 404:
                    raise
                return None
            if all(n in runs and runs[n].phase.is_terminal for n in names):
                return runs
            return None

        runs: dict[str, Any] = stack.wait_for(f"runs {names}", terminal, seconds=seconds)
        return runs


def wait_running_past(
    stack: ControlPlane, namespace: str, name: str, step: int, seconds: float = 400
) -> dict[str, Any]:
    """The run once it is Running and has logged `step` (its pod is worth evicting)."""

    def running_past() -> dict[str, Any] | None:
        run = stack.run_by_name(namespace, name)
        return (
            run if run and run["phase"] == "Running" and (run["latest_step"] or 0) >= step else None
        )

    found: dict[str, Any] = stack.wait_for(f"{name} past step {step}", running_past, seconds)
    return found


def losses(stack: ControlPlane, run_id: int) -> dict[int, float]:
    (series,) = stack.get(f"/runs/{run_id}/metrics", keys="loss")["series"]
    return dict(zip(series["steps"], series["values"], strict=True))
