"""A day on a big cluster, compressed (issue 9, part 3): fake GPU nodes, TrainingRuns of mixed
shapes arriving over time, spot nodes reclaimed every minute, a simulated workload that
registers checkpoints and heartbeats through the API, and everything measured.

    eval "$(scripts/services up)"
    .venv/bin/python -m benchmarks.cluster_day       # 1,000 nodes, 20 minutes, 5 -> 60 runs/min
    .venv/bin/python -m benchmarks.cluster_day --nodes 50 --minutes 3 --keep-cluster   # a try

The cluster is a private one of scripts/cluster (state in /tmp/crucible-cluster-day, its own
ports, so it never touches the tests' or anyone's default cluster), with `crucible server`
(Postgres, a database of its own), `crucible worker` (Celery on Redis database 12) and
`crucible operator` as separate processes (benchmarks.operator_bench.bench_stack).

What happens, for `--minutes` of wall-clock time:

* arrivals: TrainingRuns created as a Poisson process whose rate goes linearly from `--rate`
  to `--rate-end` runs per minute (a ramp finds where the machine stops keeping up); shapes
  drawn from `--mix` (1 GPU, 8 GPUs, gangs of 2-8 nodes x 8 GPUs); a share `--eval-share`
  with an eval policy; lengths exponential with mean `--run-minutes` of useful work;
* the workload (this process, playing each run's rank 0): once all pods of an attempt are
  Running it makes progress; every `--checkpoint-every` seconds of progress it registers a
  checkpoint with `POST /runs/{id}/checkpoints` (the run id and attempt from the pod's
  CRUCIBLE_RUN_ID / CRUCIBLE_ATTEMPT, the workload token from the namespace's Secret, as
  the SDK does), sends a heartbeat every `--heartbeat-every` seconds (one at a time, as the
  SDK's heartbeat thread does), and when its work is done it exits 0 (the kwok stage
  `crucible-pod-exit`: annotation crucible.dev/fake-exit-code on each pod); eval pods exit
  0 after `--eval-seconds`;
* preemptions: every `--preempt-every` seconds a share `--preempt-share` of the nodes is
  deleted (as a cloud reclaiming spot nodes does) and re-added `--readd-after` seconds later.

Measured: scheduling latency (create returned -> all pods of attempt 1 Running), recovery
latency (node deleted -> the interrupted run's next attempt all Running, and -> its first
replacement pod created), eval-trigger latency (checkpoint POST -> EvalJob seen), the API's
latency from a separate probe process (run list, run get, metric write, continuously),
goodput (useful GPU-seconds / GPU-seconds allocated to training pods: the work since the
last checkpoint is lost at each interruption), database size over time, CPU per process
every `--sample-every` seconds from /proc, and the backlogs (runs waiting for their pods,
creates not yet accepted, Celery queue length, outbox rows not yet handled, workload calls
in flight). Results: benchmarks/results/cluster_day.json and cluster_day.png.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import multiprocessing
import os
import random
import secrets
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import orjson
import redis
from benchmarks.local_recovery_bench import percentiles
from benchmarks.operator_bench import (
    RESULTS,
    EvalJob,
    PodWatch,
    _metrics_up,
    bench_stack,
    training_run,
    write,
)
from lightkube import AsyncClient, codecs
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import on_error_retry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from tests.checkpoint_files import checkpoint_files
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import ADMIN_TOKEN, Stack

NAME = "cluster_day"
# A private cluster: never scripts/cluster's default state folder or ports (the tests' and
# everyone else's).
CLUSTER_ENV = {
    "CRUCIBLE_APISERVER_PORT": "36443",
    "CRUCIBLE_ETCD_PORT": "32379",
    "CRUCIBLE_ETCD_PEER_PORT": "32380",
    "CRUCIBLE_CONTROLLER_MANAGER_PORT": "36257",
    "CRUCIBLE_SCHEDULER_PORT": "36259",
    "CRUCIBLE_KWOK_PORT": "36247",
}
BROKER_DATABASE = 12
CLUSTER_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
GPU = "nvidia.com/gpu"


# --- the runs --------------------------------------------------------------------------


@dataclass
class SimRun:
    name: str
    nodes: int
    gpus_per_node: int
    length_s: float  # useful work it needs
    evals: bool
    arrived: float
    created: float | None = None  # the create call returned
    run_id: int | None = None
    attempt: int = 0  # highest attempt whose pods were seen
    first_pod_seen: dict[int, float] = field(default_factory=dict)  # attempt -> time
    resume_from: dict[int, str | None] = field(default_factory=dict)  # attempt -> env value
    running_attempt: int = 0  # the attempt whose gang is running (0: none)
    started_at: float | None = None  # when all its pods were Running
    base: float = 0.0  # progress when that attempt started (its checkpoint's)
    ckpt_progress: float = 0.0  # progress at the latest registered checkpoint
    ckpt_id: int | None = None
    ckpt_inflight: bool = False
    heartbeat_inflight: bool = False  # one at a time, as the SDK's heartbeat thread sends them
    last_heartbeat: float = 0.0
    interrupted_at: float | None = None  # node deletion that hit the running attempt
    pending_recovery: tuple[int, float] | None = None  # (attempt interrupted, node deleted)
    done_at: float | None = None
    lost_s: float = 0.0  # progress lost at interruptions
    interruptions: int = 0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def pods(self, attempt: int) -> list[str]:
        return [f"{self.name}-a{attempt}-{rank}" for rank in range(self.nodes)]

    def progress(self, now: float) -> float:
        if self.started_at is None:
            return self.base
        return self.base + max(0.0, now - self.started_at)


def parse_mix(mix: str) -> list[tuple[int, int, float]]:
    """`1x1:50,1x8:30,2x8:10`: (nodes, GPUs per node, weight)."""
    shapes = []
    for item in mix.split(","):
        shape, weight = item.split(":")
        nodes, gpus = shape.split("x")
        shapes.append((int(nodes), int(gpus), float(weight)))
    return shapes


def shape_name(nodes: int, gpus: int) -> str:
    return f"{nodes}x{gpus}"


# --- CPU and memory per process, from /proc --------------------------------------------


def _proc_table() -> dict[int, tuple[int, float, int]]:
    """pid -> (ppid, CPU seconds of it and its reaped children, RSS bytes)."""
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            statm = Path(f"/proc/{entry.name}/statm").read_text().split()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = sum(int(x) for x in fields[11:15]) / tick
        table[int(entry.name)] = (int(fields[1]), cpu, int(statm[1]) * page)
    return table


def _machine_busy_seconds() -> float:
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Cumulative CPU seconds and RSS of each process group (a process and its
    descendants, the reaped ones included through their parents' child times; a
    descendant that is another group's root counts for that group only: the stack's
    processes are this benchmark's children)."""

    def __init__(self, roots: dict[str, list[int]]) -> None:
        self.roots = roots
        self.all_roots = {pid for pids in roots.values() for pid in pids}

    def sample(self) -> dict[str, tuple[float, float]]:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        out = {}
        for group, pids in self.roots.items():
            cpu = rss = 0.0
            todo = [p for p in pids if p in table]
            seen = set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                if pid in self.all_roots and pid not in pids:
                    continue
                cpu += table[pid][1]
                rss += table[pid][2]
                todo += children.get(pid, [])
            out[group] = (cpu, rss / 2**20)
        out["machine (all processes)"] = (_machine_busy_seconds(), 0.0)
        return out


def _pid_file(path: Path) -> list[int]:
    try:
        return [int(path.read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


def process_roots(stack: Stack, cluster_dir: Path) -> dict[str, list[int]]:
    roots = {c: _pid_file(cluster_dir / "pids" / f"{c}.pid") for c in CLUSTER_COMPONENTS}
    for name, process in (
        ("crucible server", stack.server),
        ("crucible worker", stack.worker),
        ("crucible operator", stack.operator),
    ):
        roots[name] = [process.process.pid] if process.process is not None else []
    services = Path(os.environ.get("CRUCIBLE_SERVICES_DIR", "/tmp/crucible-services"))
    roots["postgres"] = _pid_file(services / "pg" / "postmaster.pid")
    roots["redis"] = _pid_file(services / "redis.pid")
    roots["benchmark (load + probe)"] = [os.getpid()]
    return roots


# --- the API probe (its own process, so the simulation's loop does not skew it) --------


def probe_api(url: str, project: str, run_id: int, out: str, stop_at: float, pause: float) -> None:
    """Run list, run get and a 100-point metric write, one after another, until `stop_at`
    (time.monotonic()); one JSON line per request: t, route, seconds, status."""
    client = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60
    )
    step = 0
    with open(out, "ab") as sink:
        while time.monotonic() < stop_at:
            step += 1
            calls: list[tuple[str, str, str, Any, dict[str, str]]] = [
                ("GET /runs (list, 50)", "GET", "/api/v1/runs", None, {}),
                ("GET /runs/{id}", "GET", f"/api/v1/runs/{run_id}", None, {}),
                (
                    "POST /runs/{id}/metrics (100 points)",
                    "POST",
                    f"/api/v1/runs/{run_id}/metrics",
                    {
                        "points": [
                            {"key": f"probe/m{k}", "step": step, "value": random.random()}
                            for k in range(100)
                        ]
                    },
                    {"Idempotency-Key": secrets.token_hex(16)},
                ),
            ]
            for route, method, path, body, headers in calls:
                params = (
                    {"project": project, "limit": "50"} if route.startswith("GET /runs (") else {}
                )
                started = time.monotonic()
                try:
                    response = client.request(
                        method, path, json=body, params=params, headers=headers
                    )
                    status = response.status_code
                except httpx.HTTPError:
                    status = -1
                took = time.monotonic() - started
                sink.write(
                    orjson.dumps({"t": started, "route": route, "s": took, "status": status})
                )
                sink.write(b"\n")
                sink.flush()
            time.sleep(pause)
    client.close()


# --- request counts, from the components' Prometheus metrics ----------------------------


def _counts(exposition: str, metric: str, labels: tuple[str, ...]) -> dict[str, float]:
    """`metric`'s samples summed by `labels` ("label=value,..." keys)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name != metric:
                continue
            key = " ".join(sample.labels.get(label, "") for label in labels).strip()
            out[key] = out.get(key, 0.0) + sample.value
    return out


def request_counts(stack: Stack) -> dict[str, dict[str, float]]:
    """Requests so far: the control plane's by route (and the seconds spent answering
    them), the Kubernetes API server's by verb and resource, and the operator's reconcile
    passes and pods created by kind."""
    out: dict[str, dict[str, float]] = {}
    try:
        text_ = httpx.get(f"{stack.url}/metrics", timeout=60).text
        out["control_plane"] = _counts(text_, "crucible_http_requests_total", ("method", "route"))
        out["control_plane_seconds"] = _counts(
            text_, "crucible_http_request_duration_seconds_sum", ("method", "route")
        )
    except httpx.HTTPError:
        out["control_plane"] = out["control_plane_seconds"] = {}
    try:
        text_ = h.kubectl("get", "--raw", "/metrics", timeout=120)
        out["kube_apiserver"] = _counts(
            text_, "apiserver_request_total", ("verb", "resource", "subresource")
        )
    except (h.KubectlError, subprocess.TimeoutExpired):
        out["kube_apiserver"] = {}
    try:
        text_ = httpx.get(f"http://127.0.0.1:{stack.operator_metrics_port}/", timeout=60).text
        out["operator"] = {
            **{
                f"reconcile passes {k}": v
                for k, v in _counts(
                    text_, "crucible_operator_reconcile_seconds_count", ("kind",)
                ).items()
            },
            **{
                f"pods created {k}": v
                for k, v in _counts(
                    text_, "crucible_operator_pods_created_total", ("kind",)
                ).items()
            },
        }
    except httpx.HTTPError:
        out["operator"] = {}
    return out


def count_delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], per: float
) -> dict[str, Any]:
    """The requests made during the day, most first, and per `per` (runs created)."""
    out: dict[str, Any] = {}
    for source, counts in after.items():
        delta = {k: v - before.get(source, {}).get(k, 0.0) for k, v in counts.items()}
        ranked = sorted(((k, v) for k, v in delta.items() if v > 0), key=lambda kv: -kv[1])
        out[source] = {
            k: {"total": round(v, 1), "per_run": round(v / max(per, 1), 3)} for k, v in ranked[:25]
        }
    return out


# --- the day ---------------------------------------------------------------------------


class Day:
    def __init__(self, args: argparse.Namespace, stack: Stack, namespace: str) -> None:
        self.args = args
        self.stack = stack
        self.namespace = namespace
        self.rng = random.Random(args.seed)
        self.shapes = parse_mix(args.mix)
        self.runs: dict[str, SimRun] = {}
        self.active: set[str] = set()  # created, not done
        self.arrivals = 0
        self.create_errors = 0
        self.create_backlog = 0
        self.watch = PodWatch(namespace, on_change=self._pod_changed)
        self.node_deleted: dict[str, float] = {}  # node -> deleted at (until re-added)
        self.node_ready: dict[str, bool] = {}
        self.node_added: dict[str, float] = {}
        self.errors: Counter[str] = Counter()  # workload calls answered otherwise
        self.pod_cut: dict[str, float] = {}  # pod -> its node deleted under it
        self.nodes_deleted_total = 0
        self.eval_seen: dict[int, float] = {}  # checkpoint id -> EvalJob seen
        self.ckpt_registered: dict[int, float] = {}  # checkpoint id -> POST started
        self.eval_ckpts: set[int] = set()  # checkpoints of runs with an eval policy
        self.eval_pods_finished: set[str] = set()
        self.eval_to_finish: list[str] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.scheduling: list[tuple[float, str, float]] = []  # (created, shape, latency)
        self.recovery_running: list[tuple[float, float]] = []  # (node deleted, latency)
        self.recovery_created: list[tuple[float, float]] = []
        self.resume_checked = {"latest": 0, "other": 0}
        self.interrupted_not_injected = 0
        self.checkpoints = 0
        self.checkpoint_errors = 0
        self.heartbeats = 0
        self.heartbeat_errors = 0
        self.finish_errors = 0
        self.inflight = 0
        self.samples: list[dict[str, Any]] = []
        self.rate_now = args.rate
        self.workload_token = ADMIN_TOKEN
        self.t0 = 0.0
        self.stop_at = 0.0
        self.node_template: dict[str, Any] = {}
        self.counts_before: dict[str, dict[str, float]] = {}
        self.counts_after: dict[str, dict[str, float]] = {}

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- pods -----------------------------------------------------------------------------

    def _pod_changed(self, name: str, pod: Pod) -> None:
        labels = pod.metadata.labels or {}
        kind = labels.get("crucible.dev/kind")
        if kind == "eval":
            if name in self.watch.running and name not in self.eval_pods_finished:
                self.eval_pods_finished.add(name)
                self.eval_to_finish.append(name)
            return
        run = self.runs.get(labels.get("crucible.dev/run", ""))
        if run is None or kind != "train":
            return
        attempt = int(labels.get("crucible.dev/attempt", "0"))
        if attempt not in run.first_pod_seen:
            run.first_pod_seen[attempt] = self.watch.created[name]
            env = {e.name: e.value for e in (pod.spec.containers[0].env or [])}
            run.run_id = int(env["CRUCIBLE_RUN_ID"])
            run.resume_from[attempt] = env.get("CRUCIBLE_RESUME_FROM")
        run.attempt = max(run.attempt, attempt)

    def _gpus(self, pod: Pod) -> int:
        limits = pod.spec.containers[0].resources.limits or {}
        return int(limits.get(GPU, 0))

    def _pod_end(self, pod: str) -> float | None:
        ends = [t for t in (self.watch.ended.get(pod), self.pod_cut.get(pod)) if t is not None]
        return min(ends) if ends else None

    # -- the workload ---------------------------------------------------------------------

    async def _call(
        self, http: httpx.AsyncClient, path: str, body: dict[str, Any]
    ) -> httpx.Response | None:
        self.inflight += 1
        try:
            return await http.post(path, json=body)
        except httpx.HTTPError:
            return None
        finally:
            self.inflight -= 1

    async def _checkpoint(self, http: httpx.AsyncClient, run: SimRun, now: float) -> None:
        progress = run.progress(now)
        attempt = run.running_attempt
        step = int(progress * 10)
        # Real (tiny) files: recovery checks a checkpoint's files before it resumes from it.
        files = checkpoint_files(run.name, step, f"{attempt}/{secrets.token_hex(8)}")
        body = {"step": step, **files, "attempt": attempt}
        started = time.monotonic()
        response = await self._call(http, f"/api/v1/runs/{run.run_id}/checkpoints", body)
        run.ckpt_inflight = False
        if response is None or response.status_code != 201:
            self.checkpoint_errors += 1
            self.errors[f"checkpoint {response.status_code if response else 'no answer'}"] += 1
            return
        self.checkpoints += 1
        checkpoint_id = int(response.json()["id"])
        self.ckpt_registered[checkpoint_id] = started
        if run.evals:
            self.eval_ckpts.add(checkpoint_id)
        # The checkpoint holds the progress of when it was taken, if that attempt still runs.
        if run.running_attempt == attempt and progress > run.ckpt_progress:
            run.ckpt_progress = progress
            run.ckpt_id = checkpoint_id

    async def _heartbeat(self, http: httpx.AsyncClient, run: SimRun) -> None:
        try:
            response = await self._call(
                http, f"/api/v1/runs/{run.run_id}/heartbeat", {"attempt": run.running_attempt}
            )
        finally:
            run.heartbeat_inflight = False
        if response is None or response.status_code not in (200, 409):
            self.heartbeat_errors += 1
            self.errors[f"heartbeat {response.status_code if response else 'no answer'}"] += 1
        else:
            self.heartbeats += 1

    async def _exit(self, client: AsyncClient, pods: list[str], after_s: float = 0) -> None:
        annotations = {h.FAKE_EXIT_CODE: "0"}
        if after_s:
            annotations[h.FAKE_RUN_DURATION] = f"{after_s:g}s"
        for pod in pods:
            try:
                await client.patch(
                    Pod,
                    pod,
                    {"metadata": {"annotations": annotations}},
                    namespace=self.namespace,
                )
            except Exception:  # gone meanwhile (preempted)
                self.finish_errors += 1

    def _step(self, run: SimRun, now: float, client: AsyncClient, http: httpx.AsyncClient) -> None:
        watch = self.watch
        # The running attempt ended: its node reclaimed, a pod ended, or a newer attempt.
        if run.started_at is not None:
            ends = [self._pod_end(p) for p in run.pods(run.running_attempt)]
            ended = [t for t in ends if t is not None]
            if run.attempt > run.running_attempt:
                ended.append(run.first_pod_seen[run.attempt])
            if run.interrupted_at is not None:
                ended.append(run.interrupted_at)
            if ended:
                at = min(ended)
                run.lost_s += max(0.0, run.progress(at) - run.ckpt_progress)
                run.base = run.ckpt_progress
                run.started_at = None
                run.interruptions += 1
                if run.interrupted_at is None:
                    self.interrupted_not_injected += 1
                run.interrupted_at = None
        # A newer attempt's gang all Running.
        if run.started_at is None and run.attempt > run.running_attempt:
            pods = run.pods(run.attempt)
            if all(p in watch.running and self._pod_end(p) is None for p in pods):
                at = max(watch.running[p] for p in pods)
                if run.running_attempt == 0:  # its first gang Running
                    assert run.created is not None
                    self.scheduling.append(
                        (run.created, shape_name(run.nodes, run.gpus_per_node), at - run.created)
                    )
                elif run.pending_recovery is not None:
                    interrupted, deleted = run.pending_recovery
                    if run.attempt > interrupted:
                        self.recovery_running.append((deleted, at - deleted))
                        first = min(
                            run.first_pod_seen[a] for a in run.first_pod_seen if a > interrupted
                        )
                        self.recovery_created.append((deleted, first - deleted))
                        run.pending_recovery = None
                if run.attempt > 1:
                    resumed = run.resume_from.get(run.attempt)
                    ok = run.ckpt_id is None or resumed == str(run.ckpt_id)
                    self.resume_checked["latest" if ok else "other"] += 1
                run.running_attempt = run.attempt
                run.started_at = at
                run.last_heartbeat = at
        if run.started_at is None:
            return
        progress = run.progress(now)
        if progress >= run.length_s:
            run.done_at = now
            self.active.discard(run.name)
            self._spawn(self._exit(client, run.pods(run.running_attempt)))
            return
        every = self.args.checkpoint_every
        if not run.ckpt_inflight and progress - run.ckpt_progress >= every:
            run.ckpt_inflight = True
            self._spawn(self._checkpoint(http, run, now))
        beat_every = self.args.heartbeat_every
        if beat_every and not run.heartbeat_inflight and now - run.last_heartbeat >= beat_every:
            run.last_heartbeat, run.heartbeat_inflight = now, True
            self._spawn(self._heartbeat(http, run))

    async def _workload(self, client: AsyncClient, http: httpx.AsyncClient) -> None:
        while time.monotonic() < self.stop_at:
            now = time.monotonic()
            for name in list(self.active):
                self._step(self.runs[name], now, client, http)
            # Eval pods: done after --eval-seconds.
            finish, self.eval_to_finish = self.eval_to_finish, []
            for pod_name in finish:
                if self._pod_end(pod_name) is None:
                    self._spawn(self._exit(client, [pod_name], max(0.2, self.args.eval_seconds)))
            await asyncio.sleep(0.5)

    # -- arrivals -------------------------------------------------------------------------

    def _new_run(self, i: int, now: float) -> SimRun:
        nodes, gpus, _ = self.rng.choices(self.shapes, weights=[s[2] for s in self.shapes])[0]
        length = max(30.0, self.rng.expovariate(1 / (self.args.run_minutes * 60)))
        evals = self.rng.random() < self.args.eval_share
        return SimRun(f"d{i}", nodes, gpus, length, evals, now)

    async def _create(self, client: AsyncClient, run: SimRun, gate: asyncio.Semaphore) -> None:
        spec: dict[str, Any] = {
            "experiment": "day",
            "nodes": run.nodes,
            "gpusPerNode": run.gpus_per_node,
            "recovery": {"maxInterruptions": 1000, "backoffSeconds": self.args.backoff},
        }
        if run.evals:
            spec["evals"] = [{"suite": "arith", "gpus": self.args.eval_gpus}]
        self.create_backlog += 1
        async with gate:
            self.create_backlog -= 1
            try:
                await client.create(
                    codecs.from_dict(training_run(run.name, **spec)), namespace=self.namespace
                )
            except Exception as exc:
                self.create_errors += 1
                print(f"create {run.name}: {exc}")
                return
        run.created = time.monotonic()
        self.active.add(run.name)

    async def _arrivals(self, client: AsyncClient) -> None:
        gate = asyncio.Semaphore(self.args.create_concurrency)
        duration = self.stop_at - self.t0
        tasks = set()
        while True:
            now = time.monotonic()
            fraction = min(1.0, (now - self.t0) / duration)
            self.rate_now = self.args.rate + (self.args.rate_end - self.args.rate) * fraction
            await asyncio.sleep(self.rng.expovariate(self.rate_now / 60))
            now = time.monotonic()
            if now >= self.stop_at:
                break
            run = self._new_run(self.arrivals, now)
            self.arrivals += 1
            self.runs[run.name] = run
            task = asyncio.create_task(self._create(client, run, gate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    # -- preemptions ----------------------------------------------------------------------

    def _node_manifest(self, name: str) -> dict[str, Any]:
        node = orjson.loads(orjson.dumps(self.node_template))
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        return dict(node)

    async def _readd(self, client: AsyncClient, name: str) -> None:
        await asyncio.sleep(self.args.readd_after)
        try:
            await client.create(codecs.from_dict(self._node_manifest(name)))
        except Exception as exc:
            print(f"re-adding {name}: {exc}")
        self.node_deleted.pop(name, None)

    async def _preemptions(self, client: AsyncClient) -> None:
        while True:
            await asyncio.sleep(self.args.preempt_every)
            now = time.monotonic()
            if now >= self.stop_at:
                return
            present = sorted(n for n in self.node_ready if n not in self.node_deleted)
            count = round(self.args.preempt_share * self.args.nodes)
            victims = self.rng.sample(present, min(count, len(present)))
            for node in victims:
                now = time.monotonic()
                try:
                    await client.delete(Node, node)
                except Exception as exc:
                    print(f"deleting {node}: {exc}")
                    continue
                self.node_deleted[node] = now
                self.nodes_deleted_total += 1
                # The pods on it stop being useful now; the runs they belong to are hit.
                for pod_name, pod in self.watch.pods.items():
                    if pod.spec.nodeName != node or self._pod_end(pod_name) is not None:
                        continue
                    self.pod_cut.setdefault(pod_name, now)
                    run = self.runs.get((pod.metadata.labels or {}).get("crucible.dev/run", ""))
                    if run is None or run.done_at is not None:
                        continue
                    attempt = int((pod.metadata.labels or {}).get("crucible.dev/attempt", "0"))
                    if run.started_at is not None and attempt == run.running_attempt:
                        run.interrupted_at = min(run.interrupted_at or now, now)
                        if run.pending_recovery is None:
                            run.pending_recovery = (attempt, now)
                self._spawn(self._readd(client, node))

    async def _watch_nodes(self, client: AsyncClient) -> None:
        async for event, node in client.watch(
            Node, labels={h.FAKE_NODE_LABEL: "true"}, on_error=on_error_retry
        ):
            name = node.metadata.name
            if event == "DELETED":
                self.node_ready.pop(name, None)
                continue
            if event == "ADDED":
                self.node_added[name] = time.monotonic()
            conditions = (node.status.conditions or []) if node.status else []
            self.node_ready[name] = any(
                c.type == "Ready" and c.status == "True" for c in conditions
            )

    async def _watch_evaljobs(self, client: AsyncClient) -> None:
        async for _, job in client.watch(
            EvalJob, namespace=self.namespace, on_error=on_error_retry
        ):
            self.eval_seen.setdefault(int(job.spec["checkpoint"]["id"]), time.monotonic())

    # -- sampling -------------------------------------------------------------------------

    async def _sampler(self, sampler: CpuSampler, engine: Any, broker: redis.Redis) -> None:
        previous: dict[str, tuple[float, float]] | None = None
        previous_t = 0.0
        while True:
            now = time.monotonic()
            cpu = await asyncio.to_thread(sampler.sample)
            db = await asyncio.to_thread(self._db_sample, engine)
            try:
                celery = int(await asyncio.to_thread(broker.llen, "crucible"))
            except redis.RedisError:
                celery = -1
            running = waiting = 0
            for name in self.active:
                run = self.runs[name]
                if run.started_at is not None:
                    running += 1
                else:
                    waiting += 1
            allocated = 0
            for pod_name, at in self.watch.running.items():
                if at <= now and self._pod_end(pod_name) is None:
                    allocated += self._gpus(self.watch.pods[pod_name])
            ready = sum(1 for r in self.node_ready.values() if r)
            # Not Ready: leases lapsed (not a node re-added less than 30 s ago, still starting)
            starting = sum(
                1
                for n, r in self.node_ready.items()
                if not r and now - self.node_added.get(n, 0.0) < 30
            )
            row: dict[str, Any] = {
                "t": round(now - self.t0, 1),
                "rate_per_min": round(self.rate_now, 1),
                "arrived": self.arrivals,
                "create_backlog": self.create_backlog,
                "runs_waiting": waiting,
                "runs_running": running,
                "runs_done": sum(1 for r in self.runs.values() if r.done_at is not None),
                "gpus_allocated": allocated,
                "nodes_ready": ready,
                "nodes_not_ready": len(self.node_ready) - ready - starting,
                "nodes_starting": starting,
                "nodes_deleted_now": len(self.node_deleted),
                "celery_queue": celery,
                "workload_calls_in_flight": self.inflight,
                "load_1m": round(os.getloadavg()[0], 2),
                **db,
            }
            if previous is not None:
                dt = now - previous_t
                row["cpu_cores"] = {
                    g: round(max(0.0, (cpu[g][0] - previous[g][0]) / dt), 3) for g in cpu
                }
            row["cpu_seconds"] = {g: round(v[0], 1) for g, v in cpu.items()}
            row["rss_mib"] = {g: round(v[1], 1) for g, v in cpu.items() if v[1]}
            self.samples.append(row)
            previous, previous_t = cpu, now
            if len(self.samples) % 6 == 1:
                print(
                    f"[{row['t']:7.1f}s] rate {row['rate_per_min']}/min arrived {row['arrived']}"
                    f" waiting {waiting} running {running} done {row['runs_done']}"
                    f" GPUs {allocated} ready {ready} celery {celery}"
                    f" outbox {db.get('outbox_backlog')} load {row['load_1m']}",
                    flush=True,
                )
            await asyncio.sleep(self.args.sample_every)

    def _db_sample(self, engine: Any) -> dict[str, Any]:
        try:
            with engine.connect() as connection:
                size = connection.execute(text("SELECT pg_database_size(current_database())"))
                backlog = connection.execute(
                    text("SELECT count(*) FROM outbox WHERE handled_at IS NULL")
                )
                phases = connection.execute(text("SELECT phase, count(*) FROM runs GROUP BY 1"))
                return {
                    "db_bytes": int(size.scalar_one()),
                    "outbox_backlog": int(backlog.scalar_one()),
                    "api_runs_by_phase": {str(p): int(n) for p, n in phases},
                }
        except Exception as exc:
            return {"db_error": str(exc)[:200]}

    # -- the whole day --------------------------------------------------------------------

    async def run(self, cluster_dir: Path) -> dict[str, Any]:
        args = self.args
        client = AsyncClient(namespace=self.namespace, timeout=httpx2.Timeout(120))
        template = h.kubectl_json("get", "node", "kwok-gpu-0")
        self.node_template = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "",
                "labels": template["metadata"]["labels"],
                "annotations": {
                    k: v
                    for k, v in template["metadata"].get("annotations", {}).items()
                    if k in ("kwok.x-k8s.io/node", "node.alpha.kubernetes.io/ttl")
                },
            },
            "spec": {"taints": template["spec"].get("taints", [])},
            "status": {
                "capacity": template["status"]["capacity"],
                "allocatable": template["status"]["allocatable"],
            },
        }
        await self.watch.start(client)
        background = [
            asyncio.create_task(self._watch_nodes(client)),
            asyncio.create_task(self._watch_evaljobs(client)),
        ]
        # The probe's run: one that runs all day (1 GPU, never finishes).
        await client.create(
            codecs.from_dict(training_run("probe", experiment="day")), namespace=self.namespace
        )
        probe = await asyncio.to_thread(
            self.stack.wait_for,
            "the probe run",
            lambda: self.stack.run_by_name(self.namespace, "probe"),
            300,
        )
        await asyncio.to_thread(
            self.stack.wait_for, "the workload token", lambda: self._read_token(), 120
        )
        engine = create_engine(self.stack.database_url, pool_size=1)
        broker = redis.Redis.from_url(self.stack.env["CRUCIBLE_BROKER_URL"])
        sampler = CpuSampler(process_roots(self.stack, cluster_dir))
        db_start = self._db_sample(engine)
        http = httpx.AsyncClient(
            base_url=self.stack.url,
            headers={"Authorization": f"Bearer {self.workload_token}"},
            timeout=120,
            limits=httpx.Limits(max_connections=args.http_connections),
        )
        self.counts_before = await asyncio.to_thread(request_counts, self.stack)
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + args.minutes * 60
        probe_out = Path(os.environ.get("TMPDIR", "/tmp")) / f"crucible-bench-{NAME}-probe.jsonl"
        probe_out.unlink(missing_ok=True)
        prober = multiprocessing.get_context("spawn").Process(
            target=probe_api,
            args=(
                self.stack.url,
                self.namespace,
                int(probe["id"]),
                str(probe_out),
                self.stop_at,
                args.probe_pause,
            ),
            daemon=True,
        )
        prober.start()
        background.append(asyncio.create_task(self._sampler(sampler, engine, broker)))
        print(f"day started: {args.minutes} min, {args.nodes} nodes", flush=True)
        await asyncio.gather(
            self._arrivals(client),
            self._preemptions(client),
            self._workload(client, http),
        )
        ended = time.monotonic()
        self.counts_after = await asyncio.to_thread(request_counts, self.stack)
        await asyncio.sleep(self.args.sample_every)  # the last sample
        prober.join(120)
        for task in background:
            task.cancel()
        self.watch.stop()
        results = self._results(ended, probe_out, db_start, engine)
        await http.aclose()
        await client.close()
        engine.dispose()
        return results

    def _read_token(self) -> bool:
        try:
            secret = h.kubectl_json(
                "get", "secret", "crucible-workload-token", namespace=self.namespace
            )
        except h.KubectlError:
            return False
        self.workload_token = base64.b64decode(secret["data"]["token"]).decode()
        return True

    # -- results --------------------------------------------------------------------------

    def _windows(self) -> list[tuple[float, float]]:
        width = self.args.window_minutes * 60
        edges = []
        start = 0.0
        while start < self.args.minutes * 60 - 1:
            edges.append((start, min(start + width, self.args.minutes * 60)))
            start += width
        return edges

    def _results(
        self, ended: float, probe_out: Path, db_start: dict[str, Any], engine: Any
    ) -> dict[str, Any]:
        t0 = self.t0
        # Goodput over training pods: GPU-seconds allocated (pod Running -> it ended, its
        # node went, or the day ended) against the useful ones (progress kept).
        allocated = eval_allocated = 0.0
        for pod_name, running_at in self.watch.running.items():
            pod = self.watch.pods[pod_name]
            end = min(x for x in (self._pod_end(pod_name), ended) if x is not None)
            seconds = max(0.0, end - max(running_at, t0)) * self._gpus(pod)
            if (pod.metadata.labels or {}).get("crucible.dev/kind") == "eval":
                eval_allocated += seconds
            elif (pod.metadata.labels or {}).get("crucible.dev/run") != "probe":
                allocated += seconds
        useful = lost = 0.0
        for run in self.runs.values():
            kept = run.length_s if run.done_at is not None else run.progress(ended)
            useful += kept * run.gpus
            lost += run.lost_s * run.gpus
        probe = [orjson.loads(line) for line in probe_out.read_bytes().splitlines() if line]
        routes = sorted({p["route"] for p in probe})
        windows = self._windows()

        def in_window(t: float, window: tuple[float, float]) -> bool:
            return window[0] <= t - t0 < window[1]

        def stats(values: list[float]) -> dict[str, float]:
            return percentiles(values) if values else {"n": 0}

        per_window = []
        for window in windows:
            samples = [s for s in self.samples if window[0] <= s["t"] < window[1]]
            cores: dict[str, list[float]] = {}
            for s in samples:
                for g, v in s.get("cpu_cores", {}).items():
                    cores.setdefault(g, []).append(v)
            per_window.append(
                {
                    "minutes": [round(window[0] / 60, 1), round(window[1] / 60, 1)],
                    "arrival_rate_per_min": round(
                        self.args.rate
                        + (self.args.rate_end - self.args.rate)
                        * ((window[0] + window[1]) / 2)
                        / (self.args.minutes * 60),
                        1,
                    ),
                    "scheduling": stats([x for c, _, x in self.scheduling if in_window(c, window)]),
                    "recovery_running": stats(
                        [x for d, x in self.recovery_running if in_window(d, window)]
                    ),
                    "eval_trigger": stats(
                        [
                            self.eval_seen[c] - t
                            for c, t in self.ckpt_registered.items()
                            if c in self.eval_ckpts and c in self.eval_seen and in_window(t, window)
                        ]
                    ),
                    "api": {
                        r: stats(
                            [p["s"] for p in probe if p["route"] == r and in_window(p["t"], window)]
                        )
                        for r in routes
                    },
                    "runs_waiting_max": max((s["runs_waiting"] for s in samples), default=0),
                    "runs_running_mean": round(
                        statistics.mean(s["runs_running"] for s in samples), 1
                    )
                    if samples
                    else 0,
                    "cpu_cores_mean": {
                        g: round(statistics.mean(v), 2)
                        for g, v in sorted(cores.items(), key=lambda kv: -statistics.mean(kv[1]))
                    },
                }
            )
        cpu_first = self.samples[0]["cpu_seconds"]
        cpu_last = self.samples[-1]["cpu_seconds"]
        elapsed = self.samples[-1]["t"] - self.samples[0]["t"]
        cpu_total = {
            g: round(cpu_last[g] - cpu_first.get(g, 0.0), 1)
            for g in sorted(cpu_last, key=lambda g: -(cpu_last[g] - cpu_first.get(g, 0.0)))
        }
        machine = "machine (all processes)"
        cpu_total["other processes (not this benchmark's)"] = round(
            cpu_total[machine] - sum(v for g, v in cpu_total.items() if g != machine), 1
        )
        with engine.connect() as connection:
            tables = connection.execute(
                text(
                    "SELECT relname, pg_total_relation_size(relid), n_live_tup"
                    " FROM pg_stat_user_tables ORDER BY 2 DESC LIMIT 12"
                )
            ).all()
        db_end = self._db_sample(engine)
        created = [r for r in self.runs.values() if r.created is not None]
        by_shape: dict[str, list[float]] = {}
        for _, shape, latency in self.scheduling:
            by_shape.setdefault(shape, []).append(latency)
        never_started = [r for r in created if 1 not in r.first_pod_seen or r.running_attempt == 0]
        eval_latencies = [
            self.eval_seen[c] - t
            for c, t in self.ckpt_registered.items()
            if c in self.eval_ckpts and c in self.eval_seen
        ]
        return {
            "counts": {
                "runs_arrived": self.arrivals,
                "runs_created": len(created),
                "create_errors": self.create_errors,
                "runs_completed": sum(1 for r in created if r.done_at is not None),
                "runs_never_all_running": len(never_started),
                "runs_waiting_at_end": sum(
                    1 for r in created if r.done_at is None and r.started_at is None
                ),
                "nodes_deleted": self.nodes_deleted_total,
                "interruptions_seen": sum(r.interruptions for r in self.runs.values()),
                "interruptions_not_injected": self.interrupted_not_injected,
                "recoveries_measured": len(self.recovery_running),
                "recoveries_pending_at_end": sum(
                    1 for r in created if r.pending_recovery is not None
                ),
                "resumed_from_latest_checkpoint": self.resume_checked["latest"],
                "resumed_from_another": self.resume_checked["other"],
                "checkpoints_registered": self.checkpoints,
                "checkpoint_errors": self.checkpoint_errors,
                "eval_checkpoints": len(self.eval_ckpts),
                "evaljobs_seen": len(set(self.eval_ckpts) & set(self.eval_seen)),
                "heartbeats": self.heartbeats,
                "heartbeat_errors": self.heartbeat_errors,
                "workload_errors": dict(self.errors),
                "finish_patch_errors": self.finish_errors,
                "pods_seen": len(self.watch.created),
                "api_probe_requests": len(probe),
                "api_probe_errors": sum(1 for p in probe if p["status"] not in (200, 201)),
            },
            "scheduling_latency": stats([x for _, _, x in self.scheduling]),
            "scheduling_latency_by_shape": {k: stats(v) for k, v in sorted(by_shape.items())},
            "recovery_node_deleted_to_running": stats([x for _, x in self.recovery_running]),
            "recovery_node_deleted_to_replacement_created": stats(
                [x for _, x in self.recovery_created]
            ),
            "eval_trigger_checkpoint_to_evaljob": stats(eval_latencies),
            "api_latency": {r: stats([p["s"] for p in probe if p["route"] == r]) for r in routes},
            "goodput": {
                "useful_gpu_seconds": round(useful),
                "allocated_gpu_seconds": round(allocated),
                "lost_at_interruptions_gpu_seconds": round(lost),
                "goodput": round(useful / allocated, 3) if allocated else None,
                "eval_gpu_seconds": round(eval_allocated),
                "capacity_gpu_seconds": round(self.args.nodes * 8 * (ended - t0)),
                "utilisation": round(allocated / (self.args.nodes * 8 * (ended - t0)), 3),
            },
            "database": {
                "bytes_start": db_start.get("db_bytes"),
                "bytes_end": db_end.get("db_bytes"),
                "growth_bytes": (db_end.get("db_bytes") or 0) - (db_start.get("db_bytes") or 0),
                "growth_bytes_per_run_created": round(
                    ((db_end.get("db_bytes") or 0) - (db_start.get("db_bytes") or 0))
                    / max(1, len(created))
                ),
                "largest_tables": [
                    {"table": t, "bytes": int(b), "rows": int(n)} for t, b, n in tables
                ],
            },
            "requests_during_the_day": count_delta(
                self.counts_before, self.counts_after, len(created)
            ),
            "cpu_seconds": cpu_total,
            "cpu_cores_mean": {g: round(v / elapsed, 2) for g, v in cpu_total.items()},
            "peak_rss_mib": {
                g: max(s["rss_mib"].get(g, 0) for s in self.samples)
                for g in self.samples[-1]["rss_mib"]
            },
            "nodes_not_ready_max": max(s["nodes_not_ready"] for s in self.samples),
            "runs_waiting_max": max(s["runs_waiting"] for s in self.samples),
            "celery_queue_max": max(s["celery_queue"] for s in self.samples),
            "outbox_backlog_max": max(s.get("outbox_backlog", 0) for s in self.samples),
            "per_window": per_window,
            "series": self.samples,
            "latencies": {
                "scheduling": [[round(c - t0, 1), s, round(x, 3)] for c, s, x in self.scheduling],
                "recovery": [[round(d - t0, 1), round(x, 3)] for d, x in self.recovery_running],
                "eval_trigger": [
                    [round(t - t0, 1), round(self.eval_seen[c] - t, 3)]
                    for c, t in self.ckpt_registered.items()
                    if c in self.eval_ckpts and c in self.eval_seen
                ],
                "api": [
                    [round(p["t"] - t0, 1), p["route"], round(p["s"], 4), p["status"]]
                    for p in probe
                ],
            },
        }


# --- main ------------------------------------------------------------------------------


@contextlib.contextmanager
def private_cluster(args: argparse.Namespace) -> Iterator[Path]:
    """scripts/cluster's variables for a private cluster (this process's environment, which
    bench_stack's cluster_up passes on); `scripts/cluster down` at the end unless kept."""
    cluster_dir = Path(args.cluster_dir)
    os.environ.update(CLUSTER_ENV)
    os.environ["CRUCIBLE_CLUSTER_DIR"] = str(cluster_dir)
    os.environ["CRUCIBLE_CLUSTER_START_TIMEOUT"] = str(args.start_timeout)
    if args.node_lease_seconds:
        os.environ["CRUCIBLE_KWOK_NODE_LEASE_SECONDS"] = str(args.node_lease_seconds)
    if args.node_lease_parallelism:
        os.environ["CRUCIBLE_KWOK_NODE_LEASE_PARALLELISM"] = str(args.node_lease_parallelism)
    if args.node_grace_period:
        os.environ["CRUCIBLE_NODE_MONITOR_GRACE_PERIOD"] = args.node_grace_period
    try:
        yield cluster_dir
    finally:
        if not args.keep_cluster:
            subprocess.run([str(h.CLUSTER_SCRIPT), "down"], check=False, timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes, 8 GPUs each")
    parser.add_argument("--minutes", type=float, default=20, help="wall-clock minutes")
    parser.add_argument("--rate", type=float, default=5, help="arrivals per minute at start")
    parser.add_argument("--rate-end", type=float, default=60, help="arrivals per minute at the end")
    parser.add_argument(
        "--mix", default="1x1:50,1x8:30,2x8:10,4x8:7,8x8:3", help="NODESxGPUS:WEIGHT,..."
    )
    parser.add_argument("--run-minutes", type=float, default=5, help="mean useful work per run")
    parser.add_argument("--eval-share", type=float, default=0.3, help="runs with an eval policy")
    parser.add_argument("--eval-gpus", type=int, default=1)
    parser.add_argument("--eval-seconds", type=float, default=30)
    parser.add_argument("--checkpoint-every", type=float, default=60, help="seconds of progress")
    parser.add_argument("--heartbeat-every", type=float, default=15, help="0: none")
    parser.add_argument("--preempt-every", type=float, default=60, help="seconds")
    parser.add_argument("--preempt-share", type=float, default=0.02, help="of the nodes")
    parser.add_argument("--readd-after", type=float, default=30, help="seconds")
    parser.add_argument("--backoff", type=float, default=0, help="recovery.backoffSeconds")
    parser.add_argument("--create-concurrency", type=int, default=10)
    parser.add_argument("--http-connections", type=int, default=20)
    parser.add_argument("--probe-pause", type=float, default=1.0, help="between probe rounds")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--window-minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--cluster-dir", default="/tmp/crucible-cluster-day")
    parser.add_argument("--keep-cluster", action="store_true", help="no `scripts/cluster down`")
    parser.add_argument("--start-timeout", type=int, default=600, help="cluster start, seconds")
    parser.add_argument(
        "--node-lease-seconds", type=int, default=300, help="kwok's node leases (0: default)"
    )
    parser.add_argument("--node-lease-parallelism", type=int, default=64)
    parser.add_argument("--node-grace-period", default="6m", help="controller-manager's")
    parser.add_argument("--note", default="", help="recorded in the results")
    parser.add_argument("--output", default=NAME, help="results name (benchmarks/results/)")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with (
        private_cluster(args) as cluster_dir,
        bench_stack(
            NAME,
            args.nodes,
            broker_database=BROKER_DATABASE,
            delete_timeout_s=60 if args.keep_cluster else 0,  # torn down next
            install_crds=True,
        ) as (
            stack,
            namespace,
        ),
    ):
        stack.wait_for("the operator's metrics", lambda: _metrics_up(stack), 120)
        results = asyncio.run(Day(args, stack, namespace).run(cluster_dir))
        results["load_average_before"] = load_before
        config = {
            k: v
            for k, v in vars(args).items()
            if k not in ("keep_cluster", "output", "cluster_dir", "start_timeout")
        }
        config["gpus_per_node"] = 8
        config["stack"] = "crucible server (Postgres) + crucible worker (Redis) + operator"
        config["cluster"] = {"dir": str(cluster_dir), **CLUSTER_ENV}
        write(args.output, config, results)
        from benchmarks.cluster_day_plot import plot

        plot(RESULTS / f"{args.output}.json", RESULTS / f"{args.output}.png")


if __name__ == "__main__":
    main()
