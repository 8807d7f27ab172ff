"""Metric ingestion and history reads through the real API on a real Postgres.

Starts the API under uvicorn in a subprocess (once per `--workers` value) against
CRUCIBLE_DATABASE_URL, upgraded to head first, then measures:

- ingestion: points/s from N concurrent client processes, each with one persistent HTTP
  connection and its own run, for each batch size;
- history: a 100,000-point series read whole, and a 1,000,000-point series downsampled to
  2,000 points (median of repeats, ms, as a client sees it).

Writes benchmarks/results/metrics.json and prints a summary; the results it replaces are kept
in it under "previous", for comparison. The data it writes lives in a project of its own,
deleted at the end unless --keep.

    eval "$(scripts/services up)"
    .venv/bin/python benchmarks/metrics_bench.py
"""

import argparse
import multiprocessing as mp
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import Engine, create_engine, text

from crucible.db import schema

RESULTS = Path(__file__).parent / "results" / "metrics.json"
TARGETS = {
    "ingest_points_per_s": 200_000,
    "history_full_100k_ms": 100,
    "history_downsampled_1m_to_2000_ms": 50,
}
READY_TIMEOUT_S = 300
PACKAGES = ("fastapi", "starlette", "uvicorn", "pydantic", "sqlalchemy", "psycopg", "orjson")


@dataclass(frozen=True)
class Config:
    database_url: str
    workers: list[int]
    clients: int
    batch_sizes: list[int]
    points: int
    keys: int
    history_points: int
    big_points: int
    max_points: int
    repeats: int
    idempotency_keys: bool
    keep: bool
    output: Path
    previous: Path | None


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("CRUCIBLE_DATABASE_URL"),
        help="Postgres URL (default: $CRUCIBLE_DATABASE_URL)",
    )
    parser.add_argument("--workers", default="2,4", help="uvicorn worker counts to try")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client processes")
    parser.add_argument("--batch-sizes", default="1000,10000", help="points per request")
    parser.add_argument(
        "--points",
        type=int,
        default=2_000_000,
        help="points ingested per (workers, batch size) configuration",
    )
    parser.add_argument("--keys", type=int, default=10, help="metric keys per run")
    parser.add_argument("--history-points", type=int, default=100_000)
    parser.add_argument("--big-points", type=int, default=1_000_000)
    parser.add_argument("--max-points", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=21, help="timed reads per measurement")
    parser.add_argument(
        "--no-idempotency-keys",
        action="store_true",
        help="send batches without the Idempotency-Key the SDK always sends",
    )
    parser.add_argument("--keep", action="store_true", help="keep the benchmark's project")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--previous",
        type=Path,
        help="results to keep under 'previous' for comparison (default: what --output holds)",
    )
    args = parser.parse_args()
    if not args.database_url or not args.database_url.startswith("postgresql"):
        parser.error(
            "set CRUCIBLE_DATABASE_URL (or --database-url) to a Postgres URL; "
            'run eval "$(scripts/services up)" first'
        )
    return Config(
        database_url=args.database_url,
        workers=[int(w) for w in args.workers.split(",")],
        clients=args.clients,
        batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        points=args.points,
        keys=args.keys,
        history_points=args.history_points,
        big_points=args.big_points,
        max_points=args.max_points,
        repeats=args.repeats,
        idempotency_keys=not args.no_idempotency_keys,
        keep=args.keep,
        output=args.output,
        previous=args.previous,
    )


# --- the server ------------------------------------------------------------------------------


class Server:
    """The API under uvicorn in its own process group, stopped on exit."""

    def __init__(self, config: Config, workers: int, admin_token: str, home: Path) -> None:
        self.workers = workers
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "CRUCIBLE_DATABASE_URL": config.database_url,
            "CRUCIBLE_ADMIN_TOKEN": admin_token,
            "CRUCIBLE_HOME": str(home),
        }
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "crucible.serve:app_from_env",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        self.process = subprocess.Popen(command, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        # Generous: each worker imports the whole server (torch included, through the SDK),
        # which on two busy cores takes a while.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the API did not become ready within {READY_TIMEOUT_S} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300)


def submit_run(client: httpx.Client, project: str, name: str) -> int:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "metrics-bench"},
    }
    response = client.post("/api/v1/runs", json={"project": project, "manifest": manifest})
    response.raise_for_status()
    run_id: int = response.json()["id"]
    return run_id


# --- ingestion -------------------------------------------------------------------------------


def batches(points: int, batch_size: int, keys: int, first_step: int = 0) -> list[bytes]:
    """JSON bodies of `points` points: each batch is batch_size/keys steps of every key."""
    names = [f"train/metric_{k}" for k in range(keys)]
    steps_per_batch = max(1, batch_size // keys)
    bodies = []
    step = first_step
    for _ in range(points // batch_size):
        batch = [
            {"key": name, "step": s, "value": ((s * 7919 + k) % 10_007) / 10_007, "time": 1.7e9 + s}
            for s in range(step, step + steps_per_batch)
            for k, name in enumerate(names)
        ]
        bodies.append(orjson.dumps({"points": batch}))
        step += steps_per_batch
    return bodies


def ingest_client(
    url: str,
    token: str,
    run_id: int,
    bodies: list[bytes],
    idempotency: bool,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """One client process: connect, wait for the start signal, send every body in turn."""
    headers = {"Content-Type": "application/json"}
    latencies = []
    accepted = 0
    with api(url, token) as client:
        client.get("/readyz")  # open the connection before the clock starts
        ready.release()
        go.wait()
        started = time.perf_counter()
        for body in bodies:
            if idempotency:
                headers["Idempotency-Key"] = uuid.uuid4().hex
            sent = time.perf_counter()
            response = client.post(f"/api/v1/runs/{run_id}/metrics", content=body, headers=headers)
            latencies.append(time.perf_counter() - sent)
            response.raise_for_status()
            accepted += response.json()["accepted"]
        finished = time.perf_counter()
    results.put((started, finished, accepted, latencies))


def measure_ingest(
    config: Config, server: Server, token: str, project: str, batch_size: int, tag: str
) -> dict[str, Any]:
    per_client = config.points // config.clients
    with api(server.url, token) as client:
        run_ids = [
            submit_run(client, project, f"ingest-{tag}-{batch_size}-{c}")
            for c in range(config.clients)
        ]
    context = mp.get_context("fork")
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=ingest_client,
            args=(
                server.url,
                token,
                run_id,
                batches(per_client, batch_size, config.keys),
                config.idempotency_keys,
                ready,
                go,
                results,
            ),
        )
        for run_id in run_ids
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.acquire()
    load_before = os.getloadavg()[0]
    go.set()
    outcomes = [results.get() for _ in processes]
    for process in processes:
        process.join()
    elapsed = max(o[1] for o in outcomes) - min(o[0] for o in outcomes)
    accepted = sum(o[2] for o in outcomes)
    latencies = sorted(ms for o in outcomes for ms in o[3])
    expected = config.clients * (per_client // batch_size) * batch_size
    if accepted != expected:
        raise RuntimeError(f"{accepted} points accepted, expected {expected}")
    return {
        "workers": server.workers,
        "batch_size": batch_size,
        "clients": config.clients,
        "points": accepted,
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "points_per_s": round(accepted / elapsed),
        "request_ms": {
            "p50": round(1000 * latencies[len(latencies) // 2], 1),
            "p95": round(1000 * latencies[int(len(latencies) * 0.95)], 1),
            "max": round(1000 * latencies[-1], 1),
        },
        "load_avg_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }


# --- history ---------------------------------------------------------------------------------


def load_history_run(config: Config, server: Server, token: str, project: str) -> int:
    """One run with a `full` series (100k points) and a `big` one (1M), sent in parallel."""
    with api(server.url, token) as client:
        run_id = submit_run(client, project, "history")
    plan = [("full", config.history_points), ("big", config.big_points)]
    bodies: list[bytes] = []
    for key, count in plan:
        for start in range(0, count, 10_000):
            stop = min(count, start + 10_000)
            spike = count * 3 // 5
            points = [
                {
                    "key": key,
                    "step": s,
                    "value": 1e6 if s == spike else ((s * 7919) % 10_007) / 10_007,
                    "time": 1.7e9 + s,
                }
                for s in range(start, stop)
            ]
            bodies.append(orjson.dumps({"points": points}))

    def send(body: bytes) -> None:
        with api(server.url, token) as client:
            response = client.post(
                f"/api/v1/runs/{run_id}/metrics",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            response.raise_for_status()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(send, bodies))
    return run_id


def timed_reads(
    client: httpx.Client, path: str, params: dict[str, Any], repeats: int, check: Any
) -> dict[str, float]:
    for _ in range(3):  # warm the connection, the plan cache and the buffer cache
        check(client.get(path, params=params))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(path, params=params)
        samples.append(1000 * (time.perf_counter() - started))
        check(response)
    samples.sort()
    return {
        "median": round(statistics.median(samples), 1),
        "p10": round(samples[len(samples) // 10], 1),
        "p90": round(samples[len(samples) * 9 // 10], 1),
        "min": round(samples[0], 1),
        "max": round(samples[-1], 1),
        "bytes": len(response.content),
    }


def measure_history(config: Config, server: Server, token: str, run_id: int) -> dict[str, Any]:
    path = f"/api/v1/runs/{run_id}/metrics"

    def check_full(response: httpx.Response) -> None:
        response.raise_for_status()
        series = response.json()["series"][0]
        assert len(series["steps"]) == config.history_points, len(series["steps"])

    def check_downsampled(response: httpx.Response) -> None:
        response.raise_for_status()
        series = response.json()["series"][0]
        assert series["total_points"] == config.big_points, series["total_points"]
        assert len(series["steps"]) <= config.max_points
        assert 1e6 in series["values"], "the planted spike was lost"

    load_before = os.getloadavg()[0]
    with api(server.url, token) as client:
        full = timed_reads(client, path, {"keys": "full"}, config.repeats, check_full)
        downsampled = timed_reads(
            client,
            path,
            {"keys": "big", "max_points": config.max_points},
            config.repeats,
            check_downsampled,
        )
    return {
        "workers": server.workers,
        "full_100k_ms": full,
        "downsampled_1m_to_2000_ms": downsampled,
        "load_avg_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }


def vacuum(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM (ANALYZE) metric_chunks, metric_series"))


def delete_project(engine: Engine, name: str) -> None:
    """The project, and by cascade its runs, their series and the series' chunks."""
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM projects WHERE name = :name"), {"name": name})


class LoadSampler:
    """The 1-minute load average every few seconds while the benchmark runs: the machine is
    shared, and the load says how much of it the numbers had."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self._every):
                return

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return {
            "every_s": self._every,
            "samples": len(self.samples),
            "min": round(min(self.samples), 2),
            "mean": round(statistics.fmean(self.samples), 2),
            "max": round(max(self.samples), 2),
        }


def previous_results(path: Path | None) -> dict[str, Any] | None:
    """The results this run replaces: date, machine load, config and results."""
    if path is None or not path.exists():
        return None
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return {
        key: document[key] for key in ("date", "machine", "config", "results") if key in document
    }


# --- report ----------------------------------------------------------------------------------


def machine(database_url: str) -> dict[str, Any]:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        postgres = connection.execute(text("SHOW server_version")).scalar_one()
    engine.dispose()
    meminfo = Path("/proc/meminfo").read_text().split()
    memory_kb = int(meminfo[meminfo.index("MemTotal:") + 1])
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(memory_kb / 1024**2, 1),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "postgres": postgres,
        "packages": {name: metadata.version(name) for name in PACKAGES},
    }


def summary(document: dict[str, Any]) -> str:
    results, config = document["results"], document["config"]
    before = document.get("previous", {}).get("results", {"ingest": [], "history": []})
    lines = [f"ingestion (points/s, {config['clients']} clients):"]
    for row in results["ingest"]:
        verdict = "meets" if row["points_per_s"] >= TARGETS["ingest_points_per_s"] else "misses"
        was = [
            f"was {old['points_per_s']:,}"
            for old in before["ingest"]
            if (old["workers"], old["batch_size"]) == (row["workers"], row["batch_size"])
        ]
        lines.append(
            f"  workers={row['workers']} batch={row['batch_size']:>6}: "
            f"{row['points_per_s']:>9,} points/s  (p50 request {row['request_ms']['p50']} ms, "
            f"load {row['load_avg_1m']['before']}) {verdict} the 200,000 target"
            + "".join(f"; {w}" for w in was)
        )
    lines.append("history reads (median ms):")
    for row in results["history"]:
        full, down = row["full_100k_ms"]["median"], row["downsampled_1m_to_2000_ms"]["median"]
        was = [
            f"; was {old['full_100k_ms']['median']} and "
            f"{old['downsampled_1m_to_2000_ms']['median']} ms"
            for old in before["history"]
            if old["workers"] == row["workers"]
        ]
        lines.append(
            f"  workers={row['workers']}: 100k full {full} ms (target < 100), "
            f"1M -> {config['max_points']} {down} ms (target < 50)" + "".join(was)
        )
    return "\n".join(lines)


def main() -> None:
    config = parse_args()
    previous = previous_results(config.previous or config.output)
    load_at_start = os.getloadavg()
    sampler = LoadSampler()
    engine = create_engine(config.database_url)
    schema.upgrade(engine)
    token = f"cru_bench-{secrets.token_hex(16)}"
    project = f"metrics-bench-{datetime.now(UTC):%Y%m%d%H%M%S}"
    results: dict[str, Any] = {"ingest": [], "history": []}
    history_run: int | None = None
    try:
        with tempfile.TemporaryDirectory() as home:
            for workers in config.workers:
                server = Server(config, workers, token, Path(home))
                try:
                    if history_run is None:
                        with api(server.url, token) as client:
                            client.post("/api/v1/projects", json={"name": project})
                        history_run = load_history_run(config, server, token, project)
                    # Reads first, on a vacuumed table: right after millions of inserts
                    # autovacuum would be scanning the table during the timed reads.
                    vacuum(engine)
                    row = measure_history(config, server, token, history_run)
                    results["history"].append(row)
                    print(
                        f"history workers={workers}: 100k full "
                        f"{row['full_100k_ms']['median']} ms, 1M downsampled "
                        f"{row['downsampled_1m_to_2000_ms']['median']} ms",
                        flush=True,
                    )
                    for batch_size in config.batch_sizes:
                        row = measure_ingest(
                            config, server, token, project, batch_size, f"w{workers}"
                        )
                        results["ingest"].append(row)
                        print(
                            f"ingest workers={workers} batch={batch_size}: "
                            f"{row['points_per_s']:,} points/s",
                            flush=True,
                        )
                finally:
                    server.stop()
    finally:
        load_during_run = sampler.stop()
        if not config.keep:
            delete_project(engine, project)
        engine.dispose()

    document = {
        "name": "metrics",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(config.database_url)
        | {
            "load_avg_at_start": [round(x, 2) for x in load_at_start],
            "load_avg_1m_during_run": load_during_run,
        },
        "config": {
            "workers": config.workers,
            "clients": config.clients,
            "batch_sizes": config.batch_sizes,
            "points_per_configuration": config.points,
            "keys_per_run": config.keys,
            "idempotency_keys": config.idempotency_keys,
            "history_points": config.history_points,
            "big_points": config.big_points,
            "max_points": config.max_points,
            "repeats": config.repeats,
            "server": "uvicorn crucible.serve:app_from_env --factory (uvloop, httptools)",
            "targets": TARGETS,
        },
        "results": results,
    }
    if previous is not None:
        document["previous"] = previous
    config.output.parent.mkdir(parents=True, exist_ok=True)
    config.output.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    print(summary(document))
    print(f"wrote {config.output}")


if __name__ == "__main__":
    main()
