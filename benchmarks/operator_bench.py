"""The operator on the local cluster (scripts/cluster, kwok GPU nodes), with the control
plane on Postgres, a Celery worker on Redis and the operator as separate processes (as a
deployment runs them; tests/k8s/operator_stack.py).

    eval "$(scripts/services up)"; eval "$(scripts/cluster up --nodes 100)"
    .venv/bin/python -m benchmarks.operator_bench scale      # 500 TrainingRuns at once
    .venv/bin/python -m benchmarks.operator_bench recovery   # 100 preemptions, 100 checkpoints
    scripts/cluster up --nodes 4                             # back to the test cluster's size

`scale` (issue 4): create 500 TrainingRuns (1 GPU each) as fast as the API server takes
them; from a watch on pods, time from each resource's create returning to its pod being
created and to it being bound; runs/s; the operator's CPU seconds and peak memory.

`recovery` (issue 6): 10 runs, each preempted 10 times (DisruptionTarget
PreemptionByScheduler, then deleted, as kube-scheduler does); time from the injection to
the replacement pod's creation (backoffSeconds 0: the policy's own wait is not the
system's latency). Then 100 checkpoints registered through the API on a run with an eval
policy, one at a time; time to each EvalJob resource's creation.

Results: benchmarks/results/operator_scale.json and operator_recovery.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import orjson
from benchmarks.local_recovery_bench import percentiles
from lightkube import AsyncClient, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

RESULTS = Path(__file__).parent / "results"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
for _kind, _plural in (("TrainingRun", "trainingruns"), ("EvalJob", "evaljobs")):
    create_namespaced_resource("crucible.dev", "v1alpha1", _kind, _plural)
EvalJob = create_namespaced_resource("crucible.dev", "v1alpha1", "EvalJob", "evaljobs")


def training_run(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "experiment": "bench",
            "image": "registry.invalid/bench:1",
            "gpusPerNode": 1,
            "scheduling": {"tolerations": TOLERATE_GPU},
            **spec,
        },
    }


class ProcessMeter:
    """CPU seconds and peak RSS of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_cpu = self.cpu_seconds()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
        return 0.0


class PodWatch:
    """Local times at which pods were first seen created, bound and Running, and ended
    (terminal phase, being deleted, or deleted), from a pod watch; keyed by pod name, or by
    uid (`by_uid`) where a pod is recreated under its own name (Kubeflow's restart policy).
    `pods` keeps each key's latest version; `on_change(key, pod)`, if given, is called
    after each event is recorded."""

    def __init__(
        self,
        namespace: str,
        by_uid: bool = False,
        on_change: Callable[[str, Pod], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.by_uid = by_uid
        self.on_change = on_change
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.pods: dict[str, Pod] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self, client: AsyncClient) -> None:
        ready = asyncio.Event()

        async def run() -> None:
            ready.set()
            async for event, pod in client.watch(Pod, namespace=self.namespace):
                now = time.monotonic()
                key = pod.metadata.uid if self.by_uid else pod.metadata.name
                self.pods[key] = pod
                self.created.setdefault(key, now)
                if pod.spec.nodeName:
                    self.bound.setdefault(key, now)
                phase = pod.status.phase if pod.status is not None else None
                if phase == "Running":
                    self.running.setdefault(key, now)
                if (
                    event == "DELETED"
                    or pod.metadata.deletionTimestamp is not None
                    or phase in ("Succeeded", "Failed")
                ):
                    self.ended.setdefault(key, now)
                if self.on_change is not None:
                    self.on_change(key, pod)

        self._task = asyncio.create_task(run())
        await ready.wait()
        await asyncio.sleep(0.5)  # the watch is established

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def machine() -> dict[str, Any]:
    versions = h.read_versions()
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "kubernetes": versions.get("K8S_VERSION"),
        "kwok": versions.get("KWOK_VERSION"),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def write(name: str, config: dict[str, Any], results: dict[str, Any], **comparison: Any) -> None:
    """benchmarks/results/<name>.json; `comparison`: `baseline` and `ratio` where the
    benchmark compares with another system."""
    result = {
        "name": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config,
        "results": results,
        **comparison,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


# --- scale -----------------------------------------------------------------------------


async def scale(stack: Stack, namespace: str, runs: int, concurrency: int) -> dict[str, Any]:
    assert stack.operator.process is not None
    meter = ProcessMeter(stack.operator.process.pid)
    client = AsyncClient(namespace=namespace, timeout=httpx2.Timeout(120))
    watch = PodWatch(namespace)
    await watch.start(client)
    applied: dict[str, float] = {}
    gate = asyncio.Semaphore(concurrency)

    async def create(i: int) -> None:
        async with gate:
            await client.create(codecs.from_dict(training_run(f"s{i}")), namespace=namespace)
            applied[f"s{i}-a1-0"] = time.monotonic()

    # Warm-up: the namespace's first run creates its project and workload token.
    await client.create(codecs.from_dict(training_run("warmup")), namespace=namespace)
    await wait_until(lambda: "warmup-a1-0" in watch.bound, 120, "the warm-up run's pod")
    started = time.monotonic()
    await asyncio.gather(*(create(i) for i in range(runs)))
    applying = time.monotonic() - started
    await wait_until(lambda: len(watch.bound) >= runs + 1, 900, f"{runs} pods bound")
    finished = max(watch.bound[p] for p in applied)
    watch.stop()
    await client.close()
    created = [watch.created[p] - applied[p] for p in applied]
    bound = [watch.bound[p] - applied[p] for p in applied]
    return {
        "runs": runs,
        "apply_seconds": round(applying, 2),
        "all_bound_after_s": round(finished - started, 2),
        "runs_per_second": round(runs / (finished - started), 1),
        "apply_to_pod_created": percentiles(created),
        "apply_to_pod_bound": percentiles(bound),
        "operator_cpu_seconds": round(meter.cpu_seconds() - meter.start_cpu, 1),
        "operator_peak_rss_mib": meter.peak_rss_mib(),
        "nodes": len(h.kubectl_json("get", "nodes")["items"]),
    }


# --- recovery --------------------------------------------------------------------------


async def recovery(
    stack: Stack, namespace: str, runs: int, preemptions: int, checkpoints: int
) -> dict[str, Any]:
    client = AsyncClient(namespace=namespace, timeout=httpx2.Timeout(120))
    watch = PodWatch(namespace)
    await watch.start(client)
    names = [f"p{i}" for i in range(runs)]
    recovery_spec = {"maxInterruptions": 1000, "backoffSeconds": 0}
    for name in names:
        await client.create(
            codecs.from_dict(training_run(name, recovery=recovery_spec)), namespace=namespace
        )
    latencies: list[float] = []
    for attempt in range(1, preemptions + 1):
        pods = [f"{n}-a{attempt}-0" for n in names]
        await wait_until(
            lambda pods=pods: all(p in watch.bound for p in pods),  # type: ignore[misc]
            120,
            f"attempt {attempt}",
        )
        await asyncio.sleep(0.5)  # Running, and reported so
        injected = {}
        for pod in pods:
            await asyncio.to_thread(h.disrupt_pod, namespace, pod)
            injected[pod] = time.monotonic()
        successors = {p: p.replace(f"-a{attempt}-", f"-a{attempt + 1}-") for p in pods}
        await wait_until(
            lambda successors=successors: all(  # type: ignore[misc]
                s in watch.created for s in successors.values()
            ),
            120,
            "replacements",
        )
        latencies += [watch.created[successors[p]] - injected[p] for p in pods]
    watch.stop()

    # Eval triggers: each checkpoint of a run with an eval policy gets its EvalJob resource.
    await client.create(
        codecs.from_dict(training_run("evals", evals=[{"suite": "arith"}])), namespace=namespace
    )
    run = await asyncio.to_thread(
        stack.wait_for, "the evals run", lambda: stack.run_by_name(namespace, "evals")
    )
    seen: dict[int, float] = {}

    async def watch_evaljobs() -> None:
        async for _, job in client.watch(EvalJob, namespace=namespace):
            seen.setdefault(int(job.spec["checkpoint"]["id"]), time.monotonic())

    eval_watch = asyncio.create_task(watch_evaljobs())
    await asyncio.sleep(0.5)
    registered: dict[int, float] = {}
    for step in range(1, checkpoints + 1):
        body = {
            "step": step * 100,
            "uri": f"s3://bench/{namespace}/evals/{step}",
            "digest": "sha256:" + f"{step:064x}",
            "size_bytes": 1,
        }
        before = time.monotonic()
        checkpoint = await asyncio.to_thread(stack.post, f"/runs/{run['id']}/checkpoints", body)
        registered[checkpoint["id"]] = before
        # One at a time (checkpoints come minutes apart): latency, not a queue's throughput.
        await wait_until(lambda c=checkpoint["id"]: c in seen, 60, "the EvalJob")  # type: ignore[misc]
    await wait_until(lambda: set(registered) <= set(seen), 120, "EvalJobs")
    eval_watch.cancel()
    await client.close()
    return {
        "preemptions": len(latencies),
        "interruption_to_replacement_pod_created": percentiles(latencies),
        "checkpoints": len(registered),
        "checkpoint_registered_to_evaljob_created": percentiles(
            [seen[c] - registered[c] for c in registered]
        ),
    }


@contextmanager
def bench_stack(
    name: str,
    nodes: int,
    broker_database: int = 8,
    delete_timeout_s: int = 300,
    install_crds: bool = False,
) -> Iterator[tuple[Stack, str]]:
    """The cluster at `nodes` fake GPU nodes, a fresh `crucible server` + worker + operator
    stack and a namespace; on the way out the resources are deleted while the operator
    still runs (so their finalizers come off as they would), then everything stops. The
    stack's logs are printed when the benchmark fails. The cluster is scripts/cluster's,
    so its state folder and ports follow the CRUCIBLE_CLUSTER_DIR and CRUCIBLE_*_PORT
    variables of this process; `broker_database`: the stack's Redis database (another
    one than the tests' 8 when both may run); `delete_timeout_s`: how long the resources
    may take to go (0: leave them, for a cluster torn down next); `install_crds`: apply
    helm/crucible/crds first (a private cluster has none; the tests' cluster has them)."""
    cluster = h.cluster_up(nodes=nodes)
    env = cluster.env()
    os.environ.update({"KUBECONFIG": env["KUBECONFIG"], "PATH": env["PATH"]})
    if install_crds:
        crds = Path(__file__).resolve().parents[1] / "helm" / "crucible" / "crds"
        h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=120)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"crucible-bench-{name}"
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    stack = Stack(workdir, env, suffix=f"bench_{name}", broker_database=broker_database)
    stack.start()
    namespace = h.create_namespace(f"bench-{name}")
    try:
        yield stack, namespace
    except Exception:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        try:
            if delete_timeout_s > 0:
                h.kubectl(
                    "delete",
                    "crucible",
                    "--all",
                    "--wait=true",
                    f"--timeout={delete_timeout_s}s",
                    namespace=namespace,
                    check=False,
                    timeout=delete_timeout_s + 30,
                )
        except subprocess.TimeoutExpired:
            print(f"deleting the resources took over {delete_timeout_s} s", file=sys.stderr)
        finally:
            stack.stop()
            h.delete_namespace(namespace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["scale", "recovery"])
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=10, help="creates in flight (scale)")
    parser.add_argument("--preemptions", type=int, default=10, help="per run (recovery)")
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=None, help="fake GPU nodes (scale: 100)")
    args = parser.parse_args()
    nodes = args.nodes or (100 if args.which == "scale" else 4)
    with bench_stack(args.which, nodes) as (stack, namespace):
        stack.wait_for("the operator's metrics", lambda: _metrics_up(stack), 60)
        if args.which == "scale":
            runs = args.runs or 500
            results = asyncio.run(scale(stack, namespace, runs, args.concurrency))
            config = {
                "runs": runs,
                "nodes": nodes,
                "gpus_per_run": 1,
                "create_concurrency": args.concurrency,
            }
        else:
            runs = args.runs or 10
            results = asyncio.run(
                recovery(stack, namespace, runs, args.preemptions, args.checkpoints)
            )
            config = {
                "runs": runs,
                "preemptions_per_run": args.preemptions,
                "checkpoints": args.checkpoints,
                "backoff_seconds": 0,
            }
        config["stack"] = "crucible server (Postgres) + crucible worker (Redis) + operator"
        write(f"operator_{args.which}", config, results)


def _metrics_up(stack: Stack) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{stack.operator_metrics_port}/").status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
