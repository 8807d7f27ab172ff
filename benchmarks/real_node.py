"""Pods on the test cluster's real node (docs/cluster.md, "The real node") with the
workload image of scripts/images: how long a run takes to start there, and how long an
eviction takes to turn into a running next attempt (issue 20's numbers).

    eval "$(scripts/services up)"; eval "$(scripts/cluster up)"
    .venv/bin/python -m benchmarks.real_node startup    # 20 runs, one after another
    .venv/bin/python -m benchmarks.real_node recovery   # 20 evictions of one training run
    .venv/bin/python -m benchmarks.real_node recovery --storage s3   # checkpoints on S3
    .venv/bin/python -m benchmarks.real_node loop       # examples/kubernetes/loop.yaml

`startup`: TrainingRuns applied one at a time, each one pod running `python -c "import
crucible.training.train"` (the reference workload's imports, PyTorch among them, then
exit 0). Timed from `kubectl apply` returning, by polling the pod every 50 ms: the pod
created (the operator), bound (the scheduler), its container running (the sandbox, CNI and
the container started by containerd and runc: the image is already on the node, imported
by `scripts/images load`, so there is no pull), and the run Succeeded (through the API).

`recovery`: one reference SFT TrainingRun (the tiny GPT, checkpoints only on SIGTERM, on
the shared volume, backoffSeconds 0 so the policy's wait is not counted) evicted through
the Eviction API, again once its new attempt has logged a step past the one it resumed
from. Timed from the eviction call: the old pod gone (it checkpointed on SIGTERM and
exited), the next attempt's pod created and Running (what the kwok benchmark measures up
to pod creation), and its first step logged (the checkpoint loaded from the shared volume;
steps reach the API every 2 s, the SDK's flush interval).

`loop`: `kubectl apply -f examples/kubernetes/loop.yaml` as written (the operator puts
every workload pod on the real node and mounts the shared volume), then the held-out
accuracy of every checkpoint and the loop's wall time, from the apply to the last eval, to
set beside the embedded mode's (README: the same four documents as examples/demo-loop.yaml).

With `--storage s3` the operator keeps checkpoints and datasets on the S3 server of
`scripts/objectstore` instead (`eval "$(scripts/objectstore up)"` after the cluster, so it
listens on the pods' bridge): the SIGTERM checkpoint goes there and the next attempt reads
it back, its digest checked first.

Results: benchmarks/results/real_node_startup.json, real_node_recovery.json (and
real_node_recovery_s3.json), real_node_loop.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from benchmarks.local_recovery_bench import percentiles
from benchmarks.operator_bench import write
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack
from tests.k8s.real_node import (
    ON_REAL_NODE,
    add_s3_secret,
    add_shared_storage,
    claim_storage,
    install_crds,
    load_workload_image,
    object_storage,
    stack_on_real_node,
    teacher,
)
from tests.object_store import object_store

RESULTS = Path(__file__).parent / "results"
T = TypeVar("T")


def poll(what: str, check: Callable[[], T | None], seconds: float, every: float = 0.05) -> T:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


def pod_in(namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    """The pod, once it exists (and, with `phases`, is in one of them)."""
    pod = h.get_pod(namespace, name)
    if pod is None or (phases and (pod.get("status") or {}).get("phase") not in phases):
        return None
    return pod


def pod_gone(namespace: str, name: str) -> bool | None:
    return True if h.get_pod(namespace, name) is None else None


def bound(namespace: str, name: str) -> str | None:
    pod = h.get_pod(namespace, name)
    return None if pod is None else pod["spec"].get("nodeName")


def run_in(stack: Stack, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    run = stack.run_by_name(namespace, name)
    return run if run is not None and run["phase"] == phase else None


def stepped_past(stack: Stack, namespace: str, name: str, step: int) -> dict[str, Any] | None:
    run = stack.run_by_name(namespace, name)
    return run if run is not None and (run["latest_step"] or 0) > step else None


def training_run(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"experiment": "bench", "scheduling": ON_REAL_NODE, **spec},
    }


def startup(stack: Stack, namespace: str, runs: int) -> dict[str, Any]:
    created, scheduled, running, succeeded = [], [], [], []
    command = ["python", "-c", "import crucible.training.train"]
    for i in range(runs):
        name, pod = f"start-{i}", f"start-{i}-a1-0"
        h.apply(training_run(name, namespace, command=command))
        t0 = time.monotonic()
        poll("pod created", lambda: pod_in(namespace, pod), 120)  # noqa: B023
        created.append(time.monotonic() - t0)
        poll("pod bound", lambda: bound(namespace, pod), 120)  # noqa: B023
        scheduled.append(time.monotonic() - t0)
        poll("pod running", lambda: pod_in(namespace, pod, "Running", "Succeeded"), 120)  # noqa: B023
        running.append(time.monotonic() - t0)
        poll("run succeeded", lambda: run_in(stack, namespace, name, "Succeeded"), 300, 0.2)  # noqa: B023
        succeeded.append(time.monotonic() - t0)
        print(
            f"{name}: pod created {created[-1]:.2f} s, running {running[-1]:.2f} s, "
            f"run succeeded {succeeded[-1]:.2f} s",
            flush=True,
        )
    return {
        "runs": runs,
        "apply_to_pod_created": percentiles(created),
        "apply_to_pod_bound": percentiles(scheduled),
        "apply_to_pod_running": percentiles(running),
        "apply_to_run_succeeded": percentiles(succeeded),
    }


def recovery(stack: Stack, namespace: str, evictions: int) -> dict[str, Any]:
    run = training_run(
        "evicted",
        namespace,
        inputs=[{"producedBy": "bench-teacher"}],
        config={
            "model": {"preset": "tiny"},
            "task": {"digits": 1, "operators": ["+"]},
            "train": {"mode": "sft", "steps": 1_000_000, "lr": 3e-3, "batch_size": 32},
        },
        checkpoints={"everySteps": 1_000_000, "keepLast": 3},
        recovery={"maxInterruptions": 1000, "backoffSeconds": 0},
    )
    h.apply(teacher(namespace, "bench"), run)
    gone, created, running, stepped = [], [], [], []
    resumed_step = 0
    for attempt in range(1, evictions + 1):
        pod, following = f"evicted-a{attempt}-0", f"evicted-a{attempt + 1}-0"
        poll(f"{pod} running", lambda: pod_in(namespace, pod, "Running"), 600, 0.2)  # noqa: B023
        # It trains (and has loaded its checkpoint) before it is evicted again.
        poll(
            "steps past the resumed one",
            lambda: stepped_past(stack, namespace, "evicted", resumed_step + 5),  # noqa: B023
            600,
            0.2,
        )
        t0 = time.monotonic()
        h.evict_pod(namespace, pod)
        poll("old pod gone", lambda: pod_gone(namespace, pod), 300)  # noqa: B023
        gone.append(time.monotonic() - t0)
        poll("next pod created", lambda: pod_in(namespace, following), 300)  # noqa: B023
        created.append(time.monotonic() - t0)
        poll("next pod running", lambda: pod_in(namespace, following, "Running"), 300)  # noqa: B023
        running.append(time.monotonic() - t0)
        run_id = stack.run_by_name(namespace, "evicted")["id"]  # type: ignore[index]
        opened = stack.get(f"/runs/{run_id}/attempts")[-1]
        resumed_step = stack.get(f"/checkpoints/{opened['resumed_from_checkpoint_id']}")["step"]
        poll(
            "first resumed step logged",
            lambda: stepped_past(stack, namespace, "evicted", resumed_step),  # noqa: B023
            300,
            0.1,
        )
        stepped.append(time.monotonic() - t0)
        print(
            f"eviction {attempt}: old pod gone {gone[-1]:.2f} s, next attempt running "
            f"{running[-1]:.2f} s, stepping {stepped[-1]:.2f} s (from step {resumed_step})",
            flush=True,
        )
    ends = [a["end_reason"] for a in stack.get(f"/runs/{run_id}/attempts")]
    return {
        "evictions": evictions,
        "attempt_end_reasons": {r: ends.count(r) for r in sorted({e for e in ends if e})},
        "eviction_to_old_pod_gone": percentiles(gone),
        "eviction_to_next_pod_created": percentiles(created),
        "eviction_to_next_attempt_running": percentiles(running),
        "eviction_to_first_resumed_step_logged": percentiles(stepped),
    }


def loop(stack: Stack, namespace: str) -> dict[str, Any]:
    example = Path(__file__).parents[1] / "examples" / "kubernetes" / "loop.yaml"
    t0 = time.monotonic()
    h.kubectl("apply", "-f", str(example), namespace=namespace)
    stages = ["loop-teacher", "loop-sft", "loop-rollouts", "loop-rl"]

    def finished() -> list[dict[str, Any]] | None:
        try:
            runs = stack.get("/runs", project=namespace, limit=100)["items"]
        except httpx.HTTPStatusError:
            return None  # the project exists once the operator registered the namespace
        by_name = {r["name"]: r for r in runs}
        if any(by_name.get(n, {}).get("phase") in ("Failed", "Cancelled") for n in stages):
            raise AssertionError(f"a stage failed: {runs}")
        done = all(by_name.get(n, {}).get("phase") == "Succeeded" for n in stages)
        evals = [r for r in runs if r["kind"] == "eval"]
        checkpoints = sum(
            len(stack.get(f"/runs/{by_name[n]['id']}/checkpoints")["items"])
            for n in ("loop-sft", "loop-rl")
            if done
        )
        if done and len(evals) >= checkpoints and all(e["phase"] == "Succeeded" for e in evals):
            return runs
        return None

    runs = poll("the loop", finished, 3600, every=2.0)
    wall = time.monotonic() - t0
    by_name = {r["name"]: r for r in runs}
    accuracy = {}
    for name in ("loop-sft", "loop-rl"):
        scores = stack.get(f"/runs/{by_name[name]['id']}/evals")
        accuracy[name] = {str(e["step"]): e["scores"]["accuracy"] for e in scores}
    return {"runs": len(runs), "wall_s": round(wall, 1), "held_out_accuracy": accuracy}


def previous(name: str, key: str) -> Any:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text())["results"].get(key) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["startup", "recovery", "loop"])
    parser.add_argument("--count", type=int, default=20, help="runs (startup) or evictions")
    parser.add_argument(
        "--storage",
        choices=["volume", "s3"],
        default="volume",
        help="a hostPath shared volume, or the S3 server of scripts/objectstore",
    )
    args = parser.parse_args()
    cluster = h.cluster_up()
    assert cluster.host_ip, "the cluster has no real node"
    image = load_workload_image(cluster.env())
    install_crds()
    with tempfile.TemporaryDirectory(prefix="crucible-real-node-") as tmp:
        shared = Path(tmp) / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        namespace = h.create_namespace("bench-real")
        volume = None
        kube_env = cluster.env()
        if args.storage == "s3":
            store = object_store()
            add_s3_secret(namespace, store)
            storage = object_storage(store, store.prefix("bench-real"))
            kube_env |= store.client_env  # the workers check checkpoints there
        else:
            volume = add_shared_storage(namespace, shared)
            storage = claim_storage(shared)
        stack = stack_on_real_node(
            Path(tmp) / "stack",
            kube_env,
            host_ip=cluster.host_ip,
            image=image,
            storage=storage,
            suffix="bench_realnode",
            broker_database=10,
        )
        stack.start()
        try:
            config = {"image": image, "count": args.count, "storage": args.storage}
            if args.which == "startup":
                write("real_node_startup", config, startup(stack, namespace, args.count))
            elif args.which == "loop":
                write("real_node_loop", {"image": image}, loop(stack, namespace))
            else:
                results = recovery(stack, namespace, args.count)
                results["for_comparison"] = {
                    "kwok_preemption_to_replacement_pod_created": previous(
                        "operator_recovery", "interruption_to_replacement_pod_created"
                    ),
                    "embedded_interruption_to_next_attempt_started": previous(
                        "local_recovery", "interruption_to_next_attempt"
                    ),
                }
                suffix = "_s3" if args.storage == "s3" else ""
                write(f"real_node_recovery{suffix}", config, results)
        finally:
            h.kubectl(
                "delete", "crucible", "--all", "--wait=false", namespace=namespace, check=False
            )
            stack.stop()
            h.delete_namespace(namespace)
            if volume is not None:
                h.kubectl("delete", "pv", volume, "--wait=false", check=False)


if __name__ == "__main__":
    main()
