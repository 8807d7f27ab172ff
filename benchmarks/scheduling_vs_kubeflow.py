"""Crucible's operator against Kubeflow's training operator v1 on the same local cluster
(issue 9, parts 2 and 4), on a private cluster of its own (scripts/cluster with other
ports and state folder, so it never touches the test cluster).

    eval "$(scripts/services up)"
    .venv/bin/python -m benchmarks.scheduling_vs_kubeflow scale      # N = 100, 500, 1000
    .venv/bin/python -m benchmarks.scheduling_vs_kubeflow recovery   # preemptions
    .venv/bin/python -m benchmarks.scheduling_vs_kubeflow down       # stop the private cluster
    .venv/bin/python -m benchmarks.scheduling_vs_kubeflow rewrite    # medians + plot from the file

`scale`: N PyTorchJobs (one master + `--workers` workers, `--gpus-per-pod` GPUs each)
against N TrainingRuns of the same shape (nodes = 1 + workers, gpusPerNode), created 10 at
a time on kwok nodes with 8 GPUs each, the systems alternating. Each measurement starts its
operator fresh (so peak RSS is that measurement's), creates one warm-up job, then the N;
a pod watch times apply -> all pods created and -> all pods Running. Only one operator
runs at a time. Between measurements everything is deleted and the pods are waited out.

`recovery`: J jobs of 2 pods x 8 GPUs per system; each round preempts one pod of every
job (DisruptionTarget PreemptionByScheduler, then deleted, as kube-scheduler does) and
times the interruption -> the job's pods all Running again. Kubeflow recreates the pod
(restartPolicy ExitCode; the training restarts from step 0 unless the user's code finds
its own checkpoint); Crucible starts the next attempt with CRUCIBLE_RESUME_FROM set to the
latest checkpoint registered through the API (checked on every replacement). GPU-seconds
lost per interruption follow from the model in `loss_model`.

Results: benchmarks/results/scheduling_vs_kubeflow.json (+ .png) and
recovery_vs_kubeflow.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import orjson
from benchmarks.kubeflow.training_operator import KubeflowOperator, install, pytorch_job
from benchmarks.kubeflow.training_operator import versions as kubeflow_versions
from benchmarks.local_recovery_bench import percentiles
from benchmarks.operator_bench import (
    RESULTS,
    PodWatch,
    ProcessMeter,
    _metrics_up,
    training_run,
    wait_until,
    write,
)
from lightkube import AsyncClient, codecs
from lightkube.generic_resource import create_namespaced_resource
from tests.checkpoint_files import checkpoint_files
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

REPO = Path(__file__).resolve().parents[1]
CRUCIBLE_CRDS = REPO / "helm" / "crucible" / "crds"
GPUS_PER_NODE = 8
# A cluster of its own: the default ports and state folder belong to the test suite.
PRIVATE_CLUSTER = {
    "CRUCIBLE_CLUSTER_DIR": "/tmp/kf-cluster",
    "CRUCIBLE_APISERVER_PORT": "26443",
    "CRUCIBLE_ETCD_PORT": "22379",
    "CRUCIBLE_ETCD_PEER_PORT": "22380",
    "CRUCIBLE_CONTROLLER_MANAGER_PORT": "26257",
    "CRUCIBLE_SCHEDULER_PORT": "26259",
    "CRUCIBLE_KWOK_PORT": "26247",
    "CRUCIBLE_CLUSTER_START_TIMEOUT": "900",  # 1,000 nodes on 2 busy cores take minutes
    # Node heartbeats that 2 shared cores can keep up with at 1,000 nodes: kwok renews a
    # Lease every quarter of its duration, so 40 s (the default) is ~100 writes/s, which
    # fell behind (366 of 1,000 nodes NotReady); 300 s is ~13/s, with more renewals in
    # flight, and kube-controller-manager waits 6 min for a Lease to move.
    "CRUCIBLE_KWOK_NODE_LEASE_SECONDS": "300",
    "CRUCIBLE_KWOK_NODE_LEASE_PARALLELISM": "64",
    "CRUCIBLE_NODE_MONITOR_GRACE_PERIOD": "6m",
}
HEARTBEAT_SETTINGS = (
    "CRUCIBLE_KWOK_NODE_LEASE_SECONDS",
    "CRUCIBLE_KWOK_NODE_LEASE_PARALLELISM",
    "CRUCIBLE_NODE_MONITOR_GRACE_PERIOD",
)
CRUCIBLE, KUBEFLOW = "crucible", "kubeflow"
PyTorchJob = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def nodes_not_ready() -> tuple[int, int] | None:
    """(fake nodes whose Ready condition is not True, fake nodes), or None if the
    apiserver did not answer."""
    try:
        out = h.kubectl(
            "get",
            "nodes",
            "-l",
            "crucible.dev/fake-node=true",
            "-o",
            'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}',
            timeout=60,
        )
    except (subprocess.TimeoutExpired, h.KubectlError):
        return None
    statuses = out.split()
    return sum(s != "True" for s in statuses), len(statuses)


class ReadinessSampler:
    """Counts NotReady fake nodes every `every` seconds in a thread while a measurement
    runs (kwok failing to renew node heartbeats under load shows here)."""

    def __init__(self, every: float = 30) -> None:
        self.every = every
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            sample = nodes_not_ready()
            if sample is not None:
                self.samples.append(sample)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> ReadinessSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)
        sample = nodes_not_ready()  # once more at the end
        if sample is not None:
            self.samples.append(sample)

    def summary(self) -> dict[str, Any]:
        counts = [s[0] for s in self.samples]
        return {
            "nodes_not_ready_max": max(counts) if counts else None,
            "nodes_not_ready_samples": counts,
            "nodes_seen": max((s[1] for s in self.samples), default=None),
            "node_sample_every_s": self.every,
        }


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds of every live process in a process group (a Celery worker's children)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


# --- the two systems -------------------------------------------------------------------


class System(ABC):
    """One operator under test: start it fresh, make its jobs, name their pods."""

    name: str
    job_kind: str  # for kubectl delete

    @abstractmethod
    def start(self) -> int:
        """Start the operator; its pid."""

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def job(self, name: str, workers: int, gpus_per_pod: int, **spec: Any) -> dict[str, Any]:
        """One master plus `workers` workers; `spec`: extra TrainingRun spec fields."""

    @abstractmethod
    def pod_name(self, job: str, rank: int, attempt: int = 1) -> str: ...

    def extra_cpu(self) -> float:
        """CPU seconds of the processes besides the operator that the system needs."""
        return 0.0


class Crucible(System):
    name, job_kind = CRUCIBLE, "trainingruns.crucible.dev"

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def start(self) -> int:
        self.stack.operator.start()
        self.stack.wait_for("the operator's metrics", lambda: _metrics_up(self.stack), 120)
        assert self.stack.operator.process is not None
        return self.stack.operator.process.pid

    def stop(self) -> None:
        self.stack.operator.kill(signal.SIGTERM)

    def job(self, name: str, workers: int, gpus_per_pod: int, **spec: Any) -> dict[str, Any]:
        return training_run(name, nodes=1 + workers, gpusPerNode=gpus_per_pod, **spec)

    def pod_name(self, job: str, rank: int, attempt: int = 1) -> str:
        return f"{job}-a{attempt}-{rank}"

    def extra_cpu(self) -> float:
        """The control plane the operator reports to (server + Celery worker)."""
        return sum(
            group_cpu_seconds(p.process.pid)
            for p in (self.stack.server, self.stack.worker)
            if p.process is not None
        )


class Kubeflow(System):
    name, job_kind = KUBEFLOW, "pytorchjobs.kubeflow.org"

    def __init__(self, operator: KubeflowOperator) -> None:
        self.operator = operator

    def start(self) -> int:
        self.operator.start()
        assert self.operator.process is not None
        return self.operator.process.pid

    def stop(self) -> None:
        self.operator.stop()

    def job(self, name: str, workers: int, gpus_per_pod: int, **_: Any) -> dict[str, Any]:
        return pytorch_job(name, workers, gpus_per_pod, restart_policy="ExitCode")

    def pod_name(self, job: str, rank: int, attempt: int = 1) -> str:
        return f"{job}-master-0" if rank == 0 else f"{job}-worker-{rank - 1}"


@contextmanager
def running(system: System, namespace: str) -> Iterator[ProcessMeter]:
    """The system's operator started fresh; on the way out its jobs are deleted while it
    still runs (Crucible's finalizers need it), their pods waited out, then it stops."""
    meter = ProcessMeter(system.start())
    try:
        yield meter
    finally:
        try:
            clean(system, namespace)
        except (subprocess.TimeoutExpired, h.KubectlError) as exc:
            print(f"warning: cleaning {namespace} failed: {exc}", file=sys.stderr)
        finally:
            system.stop()


def clean(system: System, namespace: str, timeout: float = 900) -> None:
    # an apiserver busy with 1,000 nodes on 2 shared cores can take minutes to answer
    h.kubectl(
        "delete",
        system.job_kind,
        "--all",
        "--wait=false",
        namespace=namespace,
        check=False,
        timeout=600,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = h.kubectl(
            "get",
            f"pods,{system.job_kind}",
            "-o",
            "name",
            namespace=namespace,
            check=False,
            timeout=120,
        ).split()
        if not left:
            break
        time.sleep(2)
    else:
        print(f"warning: {namespace} still has objects after {timeout}s", file=sys.stderr)
    h.delete_namespace(namespace)


async def create_all(
    client: AsyncClient, manifests: list[dict[str, Any]], namespace: str, concurrency: int
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def create(manifest: dict[str, Any]) -> None:
        async with gate:
            await client.create(codecs.from_dict(manifest), namespace=namespace)  # type: ignore[call-overload]

    await asyncio.gather(*(create(m) for m in manifests))


# --- scale -----------------------------------------------------------------------------


async def measure_scale(
    system: System,
    namespace: str,
    meter: ProcessMeter,
    n: int,
    workers: int,
    gpus: int,
    concurrency: int,
    deadline: float | None = None,
) -> dict[str, Any]:
    """`deadline` (time.time()): stop waiting then and record how far it got."""
    client = AsyncClient(namespace=namespace, timeout=httpx2.Timeout(300))
    watch = PodWatch(namespace)
    await watch.start(client)
    pods_per_job = 1 + workers
    warmup = [system.pod_name("warmup", r) for r in range(pods_per_job)]
    warmup_job = codecs.from_dict(system.job("warmup", workers, gpus))
    await client.create(warmup_job, namespace=namespace)  # type: ignore[call-overload]
    await wait_until(lambda: all(p in watch.running for p in warmup), 180, "the warm-up job")

    def timed(times: dict[str, float]) -> list[float]:
        return [t for p, t in times.items() if not p.startswith("warmup")]

    rss_before = meter.peak_rss_mib()
    cpu_before, extra_before = meter.cpu_seconds(), system.extra_cpu()
    load_before = load()
    started = time.monotonic()
    manifests = [system.job(f"j{i}", workers, gpus) for i in range(n)]
    await create_all(client, manifests, namespace, concurrency)
    applied = time.monotonic() - started
    want = n * pods_per_job
    wait = 3600.0 if deadline is None else max(0.0, min(3600.0, deadline - time.time()))
    complete = True
    with ReadinessSampler() as readiness:
        try:
            await wait_until(
                lambda: len(timed(watch.running)) >= want, wait, f"{want} pods Running"
            )
        except TimeoutError:
            complete = False
    cut_off = time.monotonic() - started
    created, run = timed(watch.created), timed(watch.running)
    cpu = meter.cpu_seconds() - cpu_before
    extra = system.extra_cpu() - extra_before
    watch.stop()
    await client.close()
    result = {
        "jobs": n,
        "pods": want,
        "apply_seconds": round(applied, 2),
        "all_pods_created_s": round(max(created) - started, 2) if len(created) >= want else None,
        "all_pods_running_s": round(max(run) - started, 2) if complete else None,
        "pods_running_per_s": round(len(run) / (max(run) - started if complete else cut_off), 1)
        if run
        else 0.0,
        "operator_cpu_seconds": round(cpu, 1),
        "operator_rss_after_warmup_mib": rss_before,
        "operator_peak_rss_mib": meter.peak_rss_mib(),
        "load_before": load_before,
        "load_after": load(),
        **readiness.summary(),
    }
    if not complete:  # cut off by --deadline: how far it got
        result |= {
            "cut_off_after_s": round(cut_off, 1),
            "pods_created_at_cut_off": len(created),
            "pods_running_at_cut_off": len(run),
        }
    if system.name == CRUCIBLE:
        result["control_plane_cpu_seconds"] = round(extra, 1)
    return result


def scale(args: argparse.Namespace, stack: Stack, kubeflow: KubeflowOperator) -> None:
    systems: list[System] = [Crucible(stack), Kubeflow(kubeflow)]
    config = {
        "sizes": args.sizes,
        "repeats": args.repeats,
        "nodes": args.nodes,
        "gpus_per_node": GPUS_PER_NODE,
        "shape": f"1 master + {args.workers} worker(s), {args.gpus_per_pod} GPU(s) per pod",
        "create_concurrency": args.concurrency,
        "crucible": "crucible server (Postgres) + crucible worker (Redis) + crucible operator",
        "kubeflow": "training-operator --enable-scheme=pytorchjob, 1 controller thread "
        "(its default and its deployment's), no gang scheduler, leader election and "
        "webhooks off",
        "operators": "one at a time, each started fresh per measurement",
        **kubeflow_versions(),
        "cluster_heartbeats": {k: os.environ.get(k, "") for k in HEARTBEAT_SETTINGS},
        "note": args.note,
    }
    results: dict[str, list[dict[str, Any]]] = {CRUCIBLE: [], KUBEFLOW: []}
    earlier = RESULTS / "scheduling_vs_kubeflow.json"
    previous: dict[str, Any] | None = None
    if earlier.exists():
        kept = orjson.loads(earlier.read_bytes())
        if args.append:
            results = {
                CRUCIBLE: kept["results"]["crucible"]["runs"],
                KUBEFLOW: kept["baseline"]["runs"],
            }
            config["note"] = " ".join(filter(None, [kept["config"].get("note"), args.note]))
            previous = kept.get("previous")
        else:  # the last document, kept for comparison (its own `previous` dropped)
            previous = {k: v for k, v in kept.items() if k not in ("name", "previous")}
    for n in args.sizes:
        need = (n + 1) * (1 + args.workers) * args.gpus_per_pod
        if need > args.nodes * GPUS_PER_NODE:
            raise SystemExit(f"N={n} needs {need} GPUs; {args.nodes} nodes have {args.nodes * 8}")
    pairs = [n for n in args.sizes for _ in range(args.repeats)]
    deadline = parse_deadline(args.deadline)
    # Every measurement of this invocation carries it: Kubeflow's figures are pooled from
    # the sitting of Crucible's newest ones only, so the two compare like for like.
    sitting = datetime.now(UTC).isoformat(timespec="minutes")
    appended_to = len(results[CRUCIBLE])  # (results grow in the loop)
    for index, n in enumerate(pairs):
        # alternate who goes first, continuing from the measurements appended to, or from
        # --first in this invocation
        if args.first:
            first = systems if args.first == CRUCIBLE else systems[::-1]
            order = first if index % 2 == 0 else first[::-1]
        else:
            order = systems if (index + appended_to) % 2 == 0 else systems[::-1]
        for system in order:
            if args.only and system.name != args.only:
                continue
            repeat = 1 + sum(r["jobs"] == n for r in results[system.name])
            if deadline is not None and time.time() > deadline:
                print(f"[bench] past --deadline: {system.name} N={n} not measured", file=sys.stderr)
                continue
            namespace = h.create_namespace(f"s-{system.name[:2]}-{n}")
            with running(system, namespace) as meter:
                print(f"[bench] {system.name} N={n} repeat {repeat}", file=sys.stderr)
                result = asyncio.run(
                    measure_scale(
                        system,
                        namespace,
                        meter,
                        n,
                        args.workers,
                        args.gpus_per_pod,
                        args.concurrency,
                        deadline,
                    )
                )
                # written before the clean-up, which may fail on a saturated apiserver
                print(f"[bench] {system.name}: {result}", file=sys.stderr)
                if system.name == CRUCIBLE:
                    result["operator_code"] = operator_code()
                results[system.name].append(result | {"repeat": repeat, "sitting": sitting})
                write_scale(config, results, previous)
                plot_scale(results, previous, args.nodes)


def parse_deadline(text: str | None) -> float | None:
    """HH:MM (UTC, today) -> time.time() value."""
    if not text:
        return None
    hours, minutes = (int(x) for x in text.split(":"))
    now = datetime.now(UTC)
    return now.replace(hour=hours, minute=minutes, second=0, microsecond=0).timestamp()


def operator_code() -> str:
    """The last commit that changed the operator (its own code or the control-plane client it
    calls), with "+changes" when the working tree differs there: measurements of different
    operator code are not pooled."""
    paths = ["operators/", "services/crucible/client/"]
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%h", "--", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *paths], cwd=REPO).returncode
    return commit + ("+changes" if dirty else "")


def current(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measurements of the newest operator code among `runs` (earlier ones stay in the
    file, for the record, but are not pooled into its medians or plotted)."""
    if not runs or "operator_code" not in runs[-1]:
        return runs
    newest = runs[-1]["operator_code"]
    return [r for r in runs if r.get("operator_code") == newest]


def same_sitting(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Kubeflow's measurements taken, size by size, in the sitting of Crucible's newest at
    that size (all of a size when its newest has no sitting recorded: measured before
    sittings were). Per size, because one operator version's sizes may be measured in
    different sittings (a session can end before its largest size)."""
    newest = current(results[CRUCIBLE])
    sitting_of = {r["jobs"]: r.get("sitting") for r in newest}
    return [
        r
        for r in results[KUBEFLOW]
        if sitting_of.get(r["jobs"]) is None or r.get("sitting") == sitting_of[r["jobs"]]
    ]


def rewrite() -> None:
    """The medians, ratios and plot again from the measurements in the results file."""
    kept = orjson.loads((RESULTS / "scheduling_vs_kubeflow.json").read_bytes())
    results = {CRUCIBLE: kept["results"]["crucible"]["runs"], KUBEFLOW: kept["baseline"]["runs"]}
    write_scale(kept["config"], results, kept.get("previous"))
    plot_scale(results, kept.get("previous"), kept["config"].get("nodes"))


def summarize(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Medians over the complete measurements (those cut off counted apart)."""
    at = [r for r in runs if r["jobs"] == n and r.get("all_pods_running_s") is not None]
    out: dict[str, Any] = {"measurements": len(at)}
    cut = sum(r["jobs"] == n and r.get("all_pods_running_s") is None for r in runs)
    if cut:
        out["cut_off"] = cut  # (the 3,600 s limit or --deadline)
    for key in (
        "all_pods_created_s",
        "all_pods_running_s",
        "operator_cpu_seconds",
        "operator_peak_rss_mib",
    ):
        values = [r[key] for r in at]
        if not values:
            out[key] = None
            continue
        out[key] = {
            "median": round(statistics.median(values), 2),
            "min": min(values),
            "max": max(values),
        }
    return out


def write_scale(
    config: dict[str, Any],
    results: dict[str, list[dict[str, Any]]],
    previous: dict[str, Any] | None = None,
) -> None:
    pooled = {CRUCIBLE: current(results[CRUCIBLE]), KUBEFLOW: same_sitting(results)}
    sizes = sorted({r["jobs"] for r in pooled[CRUCIBLE]} & {r["jobs"] for r in pooled[KUBEFLOW]})
    summary = {s: {str(n): summarize(pooled[s], n) for n in sizes} for s in (CRUCIBLE, KUBEFLOW)}
    ratio = {
        str(n): {
            key: round(
                summary[CRUCIBLE][str(n)][key]["median"] / summary[KUBEFLOW][str(n)][key]["median"],
                2,
            )
            for key in summary[CRUCIBLE][str(n)]
            if isinstance(summary[CRUCIBLE][str(n)][key], dict)
            and isinstance(summary[KUBEFLOW][str(n)].get(key), dict)
        }
        for n in sizes
    }
    write(
        "scheduling_vs_kubeflow",
        config,
        {"crucible": {"runs": results[CRUCIBLE], "median": summary[CRUCIBLE]}},
        baseline={"runs": results[KUBEFLOW], "median": summary[KUBEFLOW]},
        ratio={
            "definition": "Crucible's median / Kubeflow's median (< 1: Crucible lower)",
            **ratio,
        },
        **({"previous": previous} if previous else {}),
    )


def plot_scale(
    results: dict[str, list[dict[str, Any]]],
    previous: dict[str, Any] | None = None,
    nodes: int | None = None,
) -> None:
    try:
        import matplotlib
    except ImportError:  # not in the project's lock: a benchmark-only tool
        print(
            "[bench] not drawn: matplotlib is missing (.venv/bin/uv pip install --python "
            ".venv/bin/python matplotlib==3.11.2); the results file is written",
            file=sys.stderr,
        )
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for system, label in (
        (CRUCIBLE, "Crucible operator"),
        (KUBEFLOW, "Kubeflow training-operator v1"),
    ):
        runs = current(results[system]) if system == CRUCIBLE else same_sitting(results)
        for r in results[system]:
            if r not in runs and r.get("all_pods_running_s") is not None:
                ax.plot(r["jobs"], r["all_pods_running_s"], marker="x", color="0.6")
                earlier = r.get("operator_code") if system == CRUCIBLE else None
                ax.annotate(
                    f"Crucible {earlier}" if earlier else f"{label.split()[0]}, earlier sitting",
                    (r["jobs"], r["all_pods_running_s"]),
                    textcoords="offset points",
                    xytext=(6, 2),
                    fontsize=7,
                    color="0.4",
                )
        complete = [r for r in runs if r.get("all_pods_running_s") is not None]
        for r in runs:
            if r.get("all_pods_running_s") is None and "cut_off_after_s" in r:
                ax.plot(r["jobs"], r["cut_off_after_s"], marker="^", color="C3", markersize=9)
                ax.annotate(
                    f"{label.split()[0]}: cut off, {r['pods_running_at_cut_off']:,} of "
                    f"{r['pods']:,} pods Running",
                    (r["jobs"], r["cut_off_after_s"]),
                    textcoords="offset points",
                    xytext=(10, -3),
                    ha="left",
                    va="top",
                    fontsize=8,
                )
        sizes = sorted({r["jobs"] for r in complete})
        if not sizes:
            continue
        values = [[r["all_pods_running_s"] for r in complete if r["jobs"] == n] for n in sizes]
        medians = [statistics.median(v) for v in values]
        low = [m - min(v) for m, v in zip(medians, values, strict=True)]
        high = [max(v) - m for m, v in zip(medians, values, strict=True)]
        line = ax.errorbar(sizes, medians, yerr=[low, high], marker="o", capsize=4, label=label)
        if previous and previous.get("config", {}).get("nodes") != nodes:
            runs = (
                previous["results"]["crucible"]["runs"]
                if system == CRUCIBLE
                else previous["baseline"]["runs"]
            )
            old = sorted({r["jobs"] for r in runs})
            old_values = [[r["all_pods_running_s"] for r in runs if r["jobs"] == n] for n in old]
            ax.plot(
                old,
                [statistics.median(v) for v in old_values],
                marker="x",
                linestyle="none",
                color=line.lines[0].get_color(),
                label=f"{label.split()[0]}, {previous['config']['nodes']} nodes (earlier)",
            )
    ax.set_ylim(bottom=0)
    ax.margins(y=0.12)
    ax.set_xlabel("jobs applied at once (N)")
    ax.set_ylabel("apply -> all pods Running (s)")
    ax.set_title(
        "Time to all pods Running (median, min-max)" + (f", {nodes:,} kwok nodes" if nodes else "")
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "scheduling_vs_kubeflow.png", dpi=120)


# --- recovery --------------------------------------------------------------------------


async def measure_recovery(
    system: System, stack: Stack, namespace: str, jobs: int, rounds: int
) -> dict[str, Any]:
    client = AsyncClient(namespace=namespace, timeout=httpx2.Timeout(300))
    watch = PodWatch(namespace, by_uid=True)
    await watch.start(client)
    names = [f"r{i}" for i in range(jobs)]
    spec = {"recovery": {"maxInterruptions": 1000, "backoffSeconds": 0}}
    await create_all(
        client, [system.job(n, 1, GPUS_PER_NODE, **spec) for n in names], namespace, 10
    )

    def replacement(pod_name: str, since: float) -> str | None:
        """The watch key of a pod of that name created after `since` and seen Running."""
        for key, pod in list(watch.pods.items()):
            name = pod.metadata.name if pod.metadata else None
            if name == pod_name and watch.created[key] > since and key in watch.running:
                return key
        return None

    latencies: list[float] = []
    resumed, expected_resumes = 0, 0
    for attempt in range(1, rounds + 1):
        # Crucible's next attempt has new pod names; Kubeflow's replacement keeps the name.
        current = attempt if system.name == CRUCIBLE else 1
        pods = {n: [system.pod_name(n, r, current) for r in (0, 1)] for n in names}
        await wait_until(
            lambda pods=pods: all(replacement(p, 0) for ps in pods.values() for p in ps),  # type: ignore[misc]
            300,
            f"round {attempt}'s pods Running",
        )
        await asyncio.sleep(1)  # Running, and reported so
        checkpoints: dict[str, int] = {}
        if system.name == CRUCIBLE:
            for n in names:
                run = await asyncio.to_thread(
                    stack.wait_for,
                    f"run {n}",
                    lambda n=n: stack.run_by_name(namespace, n),  # type: ignore[misc]
                )
                # Real (tiny) files: recovery checks them before it resumes from them.
                files = checkpoint_files(f"{namespace}-{n}", attempt * 1000, str(attempt))
                body = {"step": attempt * 1000, **files}
                checkpoint = await asyncio.to_thread(
                    stack.post, f"/runs/{run['id']}/checkpoints", body
                )
                checkpoints[n] = checkpoint["id"]
        injected: dict[str, float] = {}
        for n in names:
            injected[n] = time.monotonic()
            await asyncio.to_thread(preempt, namespace, pods[n][1])
        following = attempt + 1 if system.name == CRUCIBLE else 1
        after = {n: [system.pod_name(n, r, following) for r in (0, 1)] for n in names}

        def back(
            n: str, after: dict[str, list[str]] = after, injected: dict[str, float] = injected
        ) -> float | None:
            # Kubeflow only recreates the preempted pod; the master keeps running (in kwok:
            # on real GPUs it fails on its NCCL timeout and restarts too).
            targets = after[n] if system.name == CRUCIBLE else [after[n][1]]
            keys = [replacement(p, injected[n]) for p in targets]
            return max(watch.running[k] for k in keys if k) if all(keys) else None

        await wait_until(lambda: all(back(n) for n in names), 300, f"round {attempt}'s recovery")
        for n in names:
            latencies.append(back(n) - injected[n])  # type: ignore[operator]
            if system.name == CRUCIBLE:
                expected_resumes += 1
                key = replacement(after[n][0], injected[n])
                pod_spec = watch.pods[key].spec if key else None
                containers = pod_spec.containers if pod_spec else []
                env = {e.name: e.value for e in containers[0].env or []} if containers else {}
                resumed += env.get("CRUCIBLE_RESUME_FROM") == str(checkpoints[n])
    watch.stop()
    await client.close()
    out: dict[str, Any] = {
        "interruptions": len(latencies),
        "interruption_to_running_again": percentiles(latencies),
        "latencies": latencies,
    }
    if system.name == CRUCIBLE:
        out["replacements_resuming_from_latest_checkpoint"] = f"{resumed}/{expected_resumes}"
    return out


def preempt(namespace: str, pod: str) -> None:
    """As kube-scheduler preempts: the DisruptionTarget condition, then the delete, which
    finds the pod gone when Crucible's operator has already stopped the gang on seeing the
    condition."""
    try:
        h.disrupt_pod(namespace, pod)
    except h.KubectlError as exc:
        if "NotFound" not in exc.stderr:
            raise


def loss_model(restart_s: dict[str, float], gpus: int) -> dict[str, Any]:
    """Expected GPU-seconds lost per interruption, interruption uniformly random in time.

    Kubeflow (no resume in the user's code): progress since the job started, T/2 on
    average for a job of length T, plus the restart. Crucible: progress since the last
    checkpoint, K/2 on average with a checkpoint every K, plus the restart. Kubeflow with
    resume written by the user: K/2 plus its own restart. All of the job's GPUs idle while
    it restarts; loading the checkpoint is not modelled (the same for both)."""
    rows = []
    for hours in (1, 8, 24):
        for minutes in (10, 30, 60):
            k, t = minutes * 60, hours * 3600
            rows.append(
                {
                    "job_hours": hours,
                    "checkpoint_every_min": minutes,
                    "kubeflow_gpu_s": round(gpus * (t / 2 + restart_s[KUBEFLOW])),
                    "kubeflow_user_resume_gpu_s": round(gpus * (k / 2 + restart_s[KUBEFLOW])),
                    "crucible_gpu_s": round(gpus * (k / 2 + restart_s[CRUCIBLE])),
                }
            )
    return {"gpus_per_job": gpus, "restart_s_median": restart_s, "rows": rows}


def recovery(args: argparse.Namespace, stack: Stack, kubeflow: KubeflowOperator) -> None:
    """`--repeats` samples per system, alternated (K C, C K, K C...), each a fresh namespace
    and a freshly started operator; the headline is the median of the samples' p50s."""
    systems: list[System] = [Kubeflow(kubeflow), Crucible(stack)]
    samples: dict[str, list[dict[str, Any]]] = {KUBEFLOW: [], CRUCIBLE: []}
    latencies: dict[str, list[float]] = {KUBEFLOW: [], CRUCIBLE: []}
    for index in range(args.repeats):
        for system in systems if index % 2 == 0 else systems[::-1]:
            namespace = h.create_namespace(f"r-{system.name[:2]}-{index + 1}")
            load_before = load()
            with running(system, namespace):
                result = asyncio.run(
                    measure_recovery(system, stack, namespace, args.jobs, args.rounds)
                )
            measured = result.pop("latencies")
            latencies[system.name] += measured
            sample = result | {"sample": index + 1, "load_before": load_before}
            sample["load_after"] = load()
            samples[system.name].append(sample)
            print(f"[bench] {system.name}: {sample}", file=sys.stderr)

    def summary(name: str) -> dict[str, Any]:
        p50s = [s["interruption_to_running_again"]["p50_s"] for s in samples[name]]
        return {
            # pooled over every sample's interruptions
            "interruption_to_running_again": percentiles(latencies[name]),
            "p50_of_samples": {
                "median": round(statistics.median(p50s), 3),
                "min": min(p50s),
                "max": max(p50s),
            },
            "samples": samples[name],
        }

    results = {name: summary(name) for name in (CRUCIBLE, KUBEFLOW)}
    restart = {n: results[n]["p50_of_samples"]["median"] for n in results}
    config = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        "samples_per_system": args.repeats,
        "order": "alternated: Kubeflow then Crucible in odd samples, Crucible then Kubeflow "
        "in even ones; each sample a fresh namespace and a freshly started operator",
        "nodes": args.nodes,
        "shape": f"1 master + 1 worker, {GPUS_PER_NODE} GPUs per pod",
        "interruption": "the worker pod (rank 1): DisruptionTarget PreemptionByScheduler, then "
        "deleted (tests/k8s/cluster_helpers.disrupt_pod)",
        "kubeflow": "restartPolicy ExitCode (143 is retryable), backoffLimit 1000",
        "crucible": "recovery.backoffSeconds 0 (the policy's own wait is not latency); a "
        "checkpoint registered through the API before each interruption",
        "operator_code": operator_code(),
        "note": args.note,
        **kubeflow_versions(),
    }
    ratios = [
        c["interruption_to_running_again"]["p50_s"] / k["interruption_to_running_again"]["p50_s"]
        for c, k in zip(samples[CRUCIBLE], samples[KUBEFLOW], strict=True)
    ]
    write(
        "recovery_vs_kubeflow",
        config,
        {"crucible": results[CRUCIBLE], "loss_model": loss_model(restart, 2 * GPUS_PER_NODE)},
        baseline=results[KUBEFLOW],
        ratio={
            "definition": "Crucible's median time to Running again / Kubeflow's (medians of "
            "the samples' p50s); per_sample: the ratio within each alternated pair",
            "time_to_running_again": round(restart[CRUCIBLE] / restart[KUBEFLOW], 2),
            "per_sample": [round(r, 2) for r in ratios],
        },
    )


# --- main ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["scale", "recovery", "rewrite", "down"])
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes, 8 GPUs each")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="scale: per size (list a size twice to repeat only it); recovery: samples per system",
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--gpus-per-pod", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10, help="creates in flight")
    parser.add_argument("--jobs", type=int, default=10, help="recovery: jobs per system")
    parser.add_argument("--rounds", type=int, default=5, help="recovery: preemptions per job")
    parser.add_argument(
        "--append", action="store_true", help="scale: add to the measurements in the JSON"
    )
    parser.add_argument("--note", default="", help="recorded in config (e.g. why scaled down)")
    parser.add_argument(
        "--first",
        choices=[CRUCIBLE, KUBEFLOW],
        help="scale: who goes first in this invocation's first pair (then alternating)",
    )
    parser.add_argument(
        "--only",
        choices=[CRUCIBLE, KUBEFLOW],
        help="scale: measure one system only (with --append, to order a long session)",
    )
    parser.add_argument(
        "--deadline",
        metavar="HH:MM",
        help="scale: UTC; stop waiting then (the measurement is recorded as cut off, with "
        "how many pods were Running) and start no measurement after it",
    )
    args = parser.parse_args()
    for key, value in PRIVATE_CLUSTER.items():
        os.environ.setdefault(key, value)
    if args.which == "down":
        print(h.cluster_command("down").stderr, file=sys.stderr)
        return
    if args.which == "rewrite":
        rewrite()
        return
    cluster = h.cluster_up(nodes=args.nodes)
    env = cluster.env()
    os.environ.update({"KUBECONFIG": env["KUBECONFIG"], "PATH": env["PATH"]})
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRUCIBLE_CRDS), timeout=120)
    install()
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"crucible-vs-kubeflow-{args.which}"
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    # Redis database 11: the tests' stack (8) may run at the same time on the shared Redis
    stack = Stack(workdir, env, suffix=f"kubeflow_{args.which}", broker_database=11)
    kubeflow = KubeflowOperator(env["KUBECONFIG"], workdir / "training-operator.log")
    stack.start(operator=False)  # the operators are started per measurement
    try:
        {"scale": scale, "recovery": recovery}[args.which](args, stack, kubeflow)
    except Exception:
        print(stack.logs() + "\n" + kubeflow.tail(), file=sys.stderr)
        raise
    finally:
        kubeflow.stop()
        stack.stop()


if __name__ == "__main__":
    main()
