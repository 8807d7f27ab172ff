"""Tracking: Crucible against MLflow on the same Postgres server (issue 9, part 1).

Installs MLflow (pinned) into .bench/mlflow-venv, or reuses it, and starts `mlflow server` and
`crucible server` with the same number of workers, each on a fresh database of the Postgres
server in CRUCIBLE_DATABASE_URL. Seeds both through their APIs at the same time (untimed),
then measures, alternating the two systems, `--repeats` times:

- ingestion, points/s from 8 client processes (each its own run and connection): 1,000-point
  batches (MLflow's log-batch maximum) on both, and Crucible's 10,000-point batches;
- the history of a 100,000-point and a 1,000,000-point metric: whole (MLflow: get-history in
  pages of 25,000, as its Python client reads it), and cut to 2,000 points for a chart
  (MLflow: get-history-bulk-interval, the route its UI's charts use);
- listing the 10,000 runs of an experiment by a tag that all of them carry, and the 1,000 that
  carry another, in pages of 1,000.

Writes benchmarks/results/tracking_vs_mlflow.json and .png, and prints the figures with the
ratios (how many times faster Crucible is). Stops both servers and drops both databases at
the end.

    eval "$(scripts/services up)"
    .venv/bin/python -m benchmarks.tracking_vs_mlflow
"""

import argparse
import multiprocessing as mp
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson
from benchmarks.metrics_bench import LoadSampler, machine
from sqlalchemy import create_engine, make_url, text
from tests.servers import free_port, wait_until_serving

from crucible.db import schema
from crucible.sdk.metrics import _encode as encode_as_the_sdk

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MLFLOW_VENV = ROOT / ".bench" / "mlflow-venv"
# The newest 3.x whose wheels pip finds here: 3.18.0's mlflow-skinny is not on the index yet.
MLFLOW_REQUIREMENTS = ("mlflow==3.17.2", "psycopg2-binary==2.9.13", "matplotlib==3.11.2")
MLFLOW_HISTORY_PAGE = 25_000  # what mlflow.client asks for (GET_METRIC_HISTORY_MAX_RESULTS)
MLFLOW_BATCH = 1_000  # MAX_METRICS_PER_BATCH
CRUCIBLE_BATCH = 10_000
GOALS = {"ingest": 20, "ingest_sdk": 50, "history": 10}
STARTUP_S = 300
HTTP_TIMEOUT_S = 600
EXPERIMENTS = ("history", "runs", "ingest")


@dataclass(frozen=True)
class Config:
    database_url: str
    workers: int
    clients: int
    repeats: int
    keys: int
    mlflow_ingest_points: int
    crucible_ingest_points: int
    runs: int
    history_points: int
    big_points: int
    chart_points: int
    page_size: int
    read_budget_s: float
    output: Path


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("CRUCIBLE_DATABASE_URL"))
    parser.add_argument("--workers", type=int, default=4, help="server processes, each system")
    parser.add_argument("--clients", type=int, default=8, help="concurrent ingestion clients")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keys", type=int, default=10, help="metric keys per ingestion run")
    parser.add_argument("--mlflow-ingest-points", type=int, default=80_000)
    parser.add_argument("--crucible-ingest-points", type=int, default=320_000)
    parser.add_argument("--runs", type=int, default=10_000, help="runs to list")
    parser.add_argument("--history-points", type=int, default=100_000)
    parser.add_argument("--big-points", type=int, default=1_000_000)
    parser.add_argument("--chart-points", type=int, default=2_000)
    parser.add_argument("--page-size", type=int, default=1_000, help="runs per list page")
    parser.add_argument(
        "--read-budget-s",
        type=float,
        default=2.0,
        help="per repeat, reads repeat until this long has passed (at least 3 under 1 s)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "tracking_vs_mlflow.json")
    args = parser.parse_args()
    if not (args.database_url or "").startswith("postgresql"):
        parser.error('no Postgres URL in CRUCIBLE_DATABASE_URL: eval "$(scripts/services up)"')
    return Config(
        database_url=args.database_url,
        workers=args.workers,
        clients=args.clients,
        repeats=args.repeats,
        keys=args.keys,
        mlflow_ingest_points=args.mlflow_ingest_points,
        crucible_ingest_points=args.crucible_ingest_points,
        runs=args.runs,
        history_points=args.history_points,
        big_points=args.big_points,
        chart_points=args.chart_points,
        page_size=args.page_size,
        read_budget_s=args.read_budget_s,
        output=args.output,
    )


# --- MLflow's environment, the databases and the servers -------------------------------------


def ensure_mlflow_venv(venv: Path) -> Path:
    """The venv's python, with MLFLOW_REQUIREMENTS installed (pip retries each download)."""
    python = venv / "bin" / "python"
    wanted = MLFLOW_REQUIREMENTS[0].split("==")[1]
    if python.exists() and installed_mlflow_version(python) == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    for attempt in range(3):
        pip = [str(python), "-m", "pip", "install", "--quiet", "--retries", "10", "--timeout", "60"]
        if subprocess.run([*pip, *MLFLOW_REQUIREMENTS], check=False).returncode == 0:
            return python
        time.sleep(10 * (attempt + 1))
    raise RuntimeError(f"could not install {' '.join(MLFLOW_REQUIREMENTS)} into {venv}")


def installed_mlflow_version(python: Path) -> str:
    result = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('mlflow'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip()


@contextmanager
def fresh_database(admin_url: str, name: str) -> Iterator[str]:
    """A new, empty database `name` on the server of admin_url (dropped first if a crashed run
    left it), dropped again on exit; yields its URL (admin_url's driver and credentials)."""
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")

    def drop() -> None:
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    drop()
    with engine.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        drop()
        engine.dispose()


def vacuum_analyze(url: str) -> None:
    """Both databases start the measurements vacuumed and analysed, not mid-autovacuum."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM (ANALYZE)"))
    engine.dispose()


@contextmanager
def server(
    command: list[str], env: dict[str, str], health: str, log: Path, what: str
) -> Iterator[None]:
    """A server in its own process group (MLflow forks uvicorn and a job runner), killed with
    its children on exit."""
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until_serving(health, process, log, STARTUP_S, what=what)
        yield
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
                process.wait(wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def mlflow_server(python: Path, url: str, port: int, workers: int, home: Path) -> Any:
    store = make_url(url).set(drivername="postgresql+psycopg2").render_as_string(False)
    command = [
        str(python.parent / "mlflow"),
        "server",
        "--backend-store-uri",
        store,
        "--default-artifact-root",
        str(home / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        # Crucible's server writes no access log either. On two cores shared with other jobs
        # a worker can take longer than uvicorn's default 5 s to import MLflow and answer the
        # supervisor, which then kills it, over and over: that is the machine, not MLflow.
        "--uvicorn-opts",
        "--no-access-log --timeout-worker-healthcheck 120",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "CRUCIBLE_"))}
    health = f"http://127.0.0.1:{port}/health"
    return server(command, env, health, home / "mlflow.log", "mlflow server")


def crucible_server(url: str, token: str, port: int, workers: int, home: Path) -> Any:
    engine = create_engine(url)
    schema.upgrade(engine)  # `crucible server` on Postgres serves a schema already at head
    engine.dispose()
    command = [sys.executable, "-m", "crucible", "server", "--port", str(port)]
    command += ["--workers", str(workers)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= {
        "CRUCIBLE_DATABASE_URL": url,
        "CRUCIBLE_ADMIN_TOKEN": token,
        "CRUCIBLE_HOME": str(home / "crucible-home"),
    }
    health = f"http://127.0.0.1:{port}/readyz"
    return server(command, env, health, home / "crucible.log", "crucible server")


@dataclass(frozen=True)
class Servers:
    mlflow_url: str
    crucible_url: str
    mlflow_database: str
    crucible_database: str


@contextmanager
def both_servers(
    python: Path, admin_url: str, prefix: str, workers: int, token: str, home: Path
) -> Iterator[Servers]:
    """`mlflow server` and `crucible server` (admin token `token`), `workers` workers each, on
    fresh databases `<prefix>_mlflow` and `<prefix>_crucible` of admin_url's server; both
    stopped and both databases dropped on exit."""
    with ExitStack() as stack:
        mlflow_database = stack.enter_context(fresh_database(admin_url, f"{prefix}_mlflow"))
        crucible_database = stack.enter_context(fresh_database(admin_url, f"{prefix}_crucible"))
        mlflow_port, crucible_port = free_port(), free_port()
        stack.enter_context(mlflow_server(python, mlflow_database, mlflow_port, workers, home))
        stack.enter_context(crucible_server(crucible_database, token, crucible_port, workers, home))
        yield Servers(
            mlflow_url=f"http://127.0.0.1:{mlflow_port}",
            crucible_url=f"http://127.0.0.1:{crucible_port}",
            mlflow_database=mlflow_database,
            crucible_database=crucible_database,
        )


# --- the two systems through their REST APIs -------------------------------------------------

Point = tuple[str, int, float, float]  # key, step, value, time (s)


class Tracker(Protocol):
    name: str
    batch_size: int  # the largest batch its API takes
    ingest_points: int  # per ingestion measurement

    health: str  # a path that answers without touching the database
    idempotency_keys: bool  # whether its writes carry an Idempotency-Key

    def client(self) -> httpx.Client: ...
    def prepare(self, client: httpx.Client) -> None: ...
    def create_run(
        self, client: httpx.Client, experiment: str, name: str, tags: dict[str, str]
    ) -> str: ...
    def batch_request(self, run: str, points: list[Point]) -> tuple[str, bytes]: ...
    def read_history(self, client: httpx.Client, run: str, key: str) -> int: ...
    def read_chart(self, client: httpx.Client, run: str, key: str, points: int) -> int: ...
    def list_runs(
        self, client: httpx.Client, experiment: str, tag: tuple[str, str], page: int
    ) -> int: ...


@dataclass
class Mlflow:
    url: str
    ingest_points: int
    name: str = "MLflow"
    batch_size: int = MLFLOW_BATCH
    health: str = "/health"
    idempotency_keys: bool = False
    experiments: dict[str, str] = field(default_factory=dict)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=HTTP_TIMEOUT_S)

    def prepare(self, client: httpx.Client) -> None:
        for name in EXPERIMENTS:
            response = client.post("/api/2.0/mlflow/experiments/create", json={"name": name})
            self.experiments[name] = _ok(response)["experiment_id"]

    def create_run(
        self, client: httpx.Client, experiment: str, name: str, tags: dict[str, str]
    ) -> str:
        body = {
            "experiment_id": self.experiments[experiment],
            "run_name": name,
            "start_time": int(time.time() * 1000),
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        run_id: str = _ok(client.post("/api/2.0/mlflow/runs/create", json=body))["run"]["info"][
            "run_id"
        ]
        return run_id

    def batch_request(self, run: str, points: list[Point]) -> tuple[str, bytes]:
        metrics = [
            {"key": k, "step": s, "value": v, "timestamp": int(t * 1000)} for k, s, v, t in points
        ]
        return "/api/2.0/mlflow/runs/log-batch", orjson.dumps({"run_id": run, "metrics": metrics})

    def read_history(self, client: httpx.Client, run: str, key: str) -> int:
        params: dict[str, str | int] = {
            "run_id": run,
            "metric_key": key,
            "max_results": MLFLOW_HISTORY_PAGE,
        }

        def fetch(token: str | None) -> Any:
            page = params | ({"page_token": token} if token else {})
            return _ok(client.get("/api/2.0/mlflow/metrics/get-history", params=page))

        return count_pages(fetch, "metrics", "next_page_token")

    def read_chart(self, client: httpx.Client, run: str, key: str, points: int) -> int:
        params: dict[str, str | int] = {"run_ids": run, "metric_key": key, "max_results": points}
        path = "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"
        return len(_ok(client.get(path, params=params))["metrics"])

    def list_runs(
        self, client: httpx.Client, experiment: str, tag: tuple[str, str], page: int
    ) -> int:
        body: dict[str, Any] = {
            "experiment_ids": [self.experiments[experiment]],
            "filter": f"tags.{tag[0]} = '{tag[1]}'",
            "max_results": page,
        }

        def fetch(token: str | None) -> Any:
            page = body | ({"page_token": token} if token else {})
            return _ok(client.post("/api/2.0/mlflow/runs/search", json=page))

        return count_pages(fetch, "runs", "next_page_token")


@dataclass
class Crucible:
    url: str
    token: str
    ingest_points: int
    project: str = "bench"
    name: str = "Crucible"
    batch_size: int = CRUCIBLE_BATCH
    health: str = "/readyz"
    idempotency_keys: bool = True  # as its SDK sends every write
    experiments: dict[str, int] = field(default_factory=dict)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=HTTP_TIMEOUT_S)

    def prepare(self, client: httpx.Client) -> None:
        """Its experiments come with their first run."""
        _ok(client.post("/api/v1/projects", json={"name": self.project}))

    def create_run(
        self, client: httpx.Client, experiment: str, name: str, tags: dict[str, str]
    ) -> str:
        manifest = {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": name},
            "spec": {"experiment": experiment},
        }
        body = {"project": self.project, "manifest": manifest, "tags": tags}
        run = _ok(client.post("/api/v1/runs", json=body))
        self.experiments[experiment] = run["experiment_id"]
        return str(run["id"])

    def batch_request(self, run: str, points: list[Point]) -> tuple[str, bytes]:
        body = [{"key": k, "step": s, "value": v, "time": t} for k, s, v, t in points]
        return f"/api/v1/runs/{run}/metrics", orjson.dumps({"points": body})

    def sdk_batch_request(self, run: str, points: list[Point]) -> tuple[str, bytes]:
        """The batch as the SDK sends it: a row per step (one `run.log` call), encoded by
        the SDK's own encoder."""
        rows: dict[int, tuple[int, float, dict[str, float]]] = {}
        for key, step, value, at in points:
            rows.setdefault(step, (step, at, {}))[2][key] = value
        return f"/api/v1/runs/{run}/metrics", encode_as_the_sdk([rows[s] for s in sorted(rows)])

    def read_history(self, client: httpx.Client, run: str, key: str) -> int:
        series = _ok(client.get(f"/api/v1/runs/{run}/metrics", params={"keys": key}))["series"]
        return len(series[0]["steps"])

    def read_chart(self, client: httpx.Client, run: str, key: str, points: int) -> int:
        params: dict[str, str | int] = {"keys": key, "max_points": points}
        series = _ok(client.get(f"/api/v1/runs/{run}/metrics", params=params))["series"]
        return len(series[0]["steps"])

    def list_runs(
        self, client: httpx.Client, experiment: str, tag: tuple[str, str], page: int
    ) -> int:
        params: dict[str, Any] = {
            "experiment_id": self.experiments[experiment],
            "tag": f"{tag[0]}={tag[1]}",
            "limit": page,
        }

        def fetch(cursor: str | None) -> Any:
            page = params | ({"cursor": cursor} if cursor else {})
            return _ok(client.get("/api/v1/runs", params=page))

        return count_pages(fetch, "items", "next_cursor")


def count_pages(fetch: Callable[[str | None], Any], items: str, token: str) -> int:
    """The number of items over all pages, fetch(token) answering one page each."""
    count, next_token = 0, None
    while True:
        page = fetch(next_token)
        count += len(page.get(items, []))
        next_token = page.get(token)
        if not next_token:
            return count


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise RuntimeError(
            f"{response.request.method} {response.request.url} answered "
            f"{response.status_code}: {response.text[:500]}"
        )
    return orjson.loads(response.content)


def metric_points(key: str, first: int, stop: int) -> list[Point]:
    return [(key, s, ((s * 7919) % 10_007) / 10_007, 1.7e9 + s) for s in range(first, stop)]


def ingest_batches(points: int, batch_size: int, keys: int) -> list[list[Point]]:
    """`points` points in batches of batch_size: batch_size/keys steps of each of `keys` keys."""
    steps = batch_size // keys
    return [
        [p for k in range(keys) for p in metric_points(f"train/metric_{k}", first, first + steps)]
        for first in range(0, points // keys, steps)
    ]


# --- seeding (untimed) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    history_run: str
    seconds: dict[str, float]


def seed(tracker: Tracker, config: Config) -> Seeded:
    """The runs to list (tagged sweep=bench, and group=g0..g9) and one run with the 100k-point
    `full` and the 1M-point `big` series, each sent by config.clients threads at once."""
    with tracker.client() as client:
        tracker.prepare(client)
        history_run = tracker.create_run(client, "history", "history", {})
    requests = [
        tracker.batch_request(history_run, metric_points(key, first, min(n, first + size)))
        for key, n in (("full", config.history_points), ("big", config.big_points))
        for size in [tracker.batch_size]
        for first in range(0, n, size)
    ]
    started = time.monotonic()
    seconds: dict[str, float] = {}

    def create_runs(offset: int) -> None:
        with tracker.client() as client:
            for i in range(offset, config.runs, config.clients):
                tags = {"sweep": "bench", "group": f"g{i % 10}"}
                tracker.create_run(client, "runs", f"run-{i:05d}", tags)
        seconds["runs"] = round(time.monotonic() - started, 1)

    def send(offset: int) -> None:
        with tracker.client() as client:
            for path, body in requests[offset :: config.clients]:
                _ok(client.post(path, content=body, headers={"Content-Type": "application/json"}))
        seconds["history_points"] = round(time.monotonic() - started, 1)

    with ThreadPoolExecutor(2 * config.clients) as pool:
        tasks = [pool.submit(create_runs, c) for c in range(config.clients)]
        tasks += [pool.submit(send, c) for c in range(config.clients)]
        for task in tasks:
            task.result()
    return Seeded(history_run=history_run, seconds=seconds)


# --- measurements ----------------------------------------------------------------------------


def post_all(tracker: Tracker, requests: list[tuple[str, bytes]], start: Any, results: Any) -> None:
    """One ingestion client process: connect, wait for every other client, send every batch."""
    headers = {"Content-Type": "application/json"}
    with tracker.client() as client:
        client.get(tracker.health)  # connect before the clock starts
        start.wait()
        started = time.perf_counter()
        for path, body in requests:
            if tracker.idempotency_keys:
                headers["Idempotency-Key"] = uuid.uuid4().hex
            _ok(client.post(path, content=body, headers=headers))
        results.put((started, time.perf_counter()))


def measure_ingest(
    tracker: Tracker,
    config: Config,
    batch_size: int,
    points: int,
    request: Callable[[str, list[Point]], tuple[str, bytes]] | None = None,
) -> float:
    """Points/s from config.clients processes, each sending points/clients to a run of its
    own, each batch made by `request` (default: the tracker's `batch_request`)."""
    request = request or tracker.batch_request
    per_client = points // config.clients
    with tracker.client() as client:
        runs = [
            tracker.create_run(client, "ingest", f"ingest-{uuid.uuid4().hex[:12]}", {})
            for _ in range(config.clients)
        ]
    context = mp.get_context("fork")
    start, results = context.Barrier(len(runs)), context.Queue()
    batches = ingest_batches(per_client, batch_size, config.keys)
    processes = []
    for run in runs:
        requests = [request(run, batch) for batch in batches]
        processes.append(context.Process(target=post_all, args=(tracker, requests, start, results)))
        processes[-1].start()
    spans: list[tuple[float, float]] = [results.get() for _ in processes]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"an ingestion client into {tracker.name} failed")
    sent = sum(len(batch) for batch in batches) * config.clients
    return sent / (max(end for _, end in spans) - min(start for start, _ in spans))


def measure_reads(
    read: Callable[[], int], check: Callable[[int], bool], budget_s: float
) -> tuple[list[float], int]:
    """Milliseconds per read (at least one, three when a read is quick, more within budget_s),
    and the number of items the last read returned; every read's count must pass `check`."""
    samples: list[float] = []
    started = time.perf_counter()
    while not samples or (
        time.perf_counter() - started < budget_s or (len(samples) < 3 and samples[-1] < 1000)
    ):
        sent = time.perf_counter()
        got = read()
        samples.append(1000 * (time.perf_counter() - sent))
        if not check(got):
            raise RuntimeError(f"a read returned {got} items")
    return samples, got


BOTH = ("MLflow", "Crucible")


@dataclass(frozen=True)
class Measure:
    key: str
    label: str  # formatted with the Config's fields
    unit: str  # "points/s" (more is better) or "ms" (less is better)
    goal: str | None
    systems: tuple[str, ...]
    baseline_of: str | None = None  # Crucible's figure is compared with MLflow's for this key


MEASURES = (
    Measure(
        "ingest_1000", "ingest, 1,000-point batches", "points/s", "ingest", ("MLflow", "Crucible")
    ),
    Measure(
        "ingest_10000",
        "ingest, 10,000-point batches (MLflow: 1,000)",
        "points/s",
        "ingest",
        ("Crucible",),
        "ingest_1000",
    ),
    Measure(
        "ingest_sdk",
        "ingest, 10,000-point batches as the SDK encodes them (MLflow: 1,000)",
        "points/s",
        "ingest_sdk",
        ("Crucible",),
        "ingest_1000",
    ),
    Measure("history_full", "history, {history_points:,} points whole", "ms", "history", BOTH),
    Measure("history_big", "history, {big_points:,} points whole", "ms", "history", BOTH),
    Measure(
        "chart_full", "chart, {history_points:,} points to {chart_points:,}", "ms", "history", BOTH
    ),
    Measure("chart_big", "chart, {big_points:,} points to {chart_points:,}", "ms", "history", BOTH),
    Measure("list_all", "list {runs:,} runs by tag", "ms", None, BOTH),
    Measure("list_tenth", "list a tenth of {runs:,} runs by tag", "ms", None, BOTH),
)


def run_measure(
    measure: Measure, tracker: Tracker, seeded: Seeded, config: Config
) -> tuple[list[float], int | None]:
    """The samples of one measurement, and for a chart the number of points it returned.
    No untimed read first: the data was just written and vacuumed, so it is in the cache."""
    if measure.key == "ingest_sdk":
        assert isinstance(tracker, Crucible)
        samples = measure_ingest(
            tracker, config, CRUCIBLE_BATCH, tracker.ingest_points, tracker.sdk_batch_request
        )
        return [samples], None
    if measure.key.startswith("ingest_"):
        batch_size = int(measure.key.removeprefix("ingest_"))
        return [measure_ingest(tracker, config, batch_size, tracker.ingest_points)], None
    run, page, charted = seeded.history_run, config.page_size, config.chart_points

    def count(n: int) -> Callable[[int], bool]:
        return lambda got: got == n

    def chart(got: int) -> bool:  # however each system cuts, about charted points
        return charted // 2 <= got <= 2 * charted

    with tracker.client() as client:
        reads: dict[str, tuple[Callable[[], int], Callable[[int], bool]]] = {
            "history_full": (
                lambda: tracker.read_history(client, run, "full"),
                count(config.history_points),
            ),
            "history_big": (
                lambda: tracker.read_history(client, run, "big"),
                count(config.big_points),
            ),
            "chart_full": (lambda: tracker.read_chart(client, run, "full", charted), chart),
            "chart_big": (lambda: tracker.read_chart(client, run, "big", charted), chart),
            "list_all": (
                lambda: tracker.list_runs(client, "runs", ("sweep", "bench"), page),
                count(config.runs),
            ),
            "list_tenth": (
                lambda: tracker.list_runs(client, "runs", ("group", "g3"), page),
                count(config.runs // 10),
            ),
        }
        read, check = reads[measure.key]
        client.get(tracker.health)  # the connection, outside the clock
        samples, got = measure_reads(read, check, config.read_budget_s)
        return samples, got if measure.key.startswith("chart_") else None


def label(measure: Measure, config: Config) -> str:
    return measure.label.format(**asdict(config))


def stats(samples: list[float], unit: str) -> dict[str, Any]:
    def rounded(x: float) -> float:
        return round(x) if unit == "points/s" else round(x, 1)

    return {
        "unit": unit,
        "median": rounded(statistics.median(samples)),
        "min": rounded(min(samples)),
        "max": rounded(max(samples)),
        "samples": len(samples),
    }


def speedup(measure: Measure, crucible: float, mlflow: float) -> float:
    """How many times faster Crucible is: points/s over points/s, or ms over ms inverted."""
    return round(crucible / mlflow if measure.unit == "points/s" else mlflow / crucible, 2)


def measure_all(
    trackers: dict[str, Tracker], seeded: dict[str, Seeded], config: Config
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every measure, each repeat alternating which system goes first; per system and measure
    the samples, the 1-minute load average before and after each repeat, and chart sizes."""
    raw: dict[str, dict[str, dict[str, Any]]] = {
        name: {m.key: {"samples": [], "load_avg_1m": []} for m in MEASURES if name in m.systems}
        for name in trackers
    }
    for repeat in range(config.repeats):
        for measure in MEASURES:
            order = measure.systems if repeat % 2 == 0 else measure.systems[::-1]
            for name in order:
                before = os.getloadavg()[0]
                samples, points = run_measure(measure, trackers[name], seeded[name], config)
                after = os.getloadavg()[0]
                entry = raw[name][measure.key]
                entry["samples"] += samples
                entry["load_avg_1m"].append([round(before, 2), round(after, 2)])
                if points is not None:
                    entry["points_returned"] = points
                print(
                    f"repeat {repeat + 1}/{config.repeats} {label(measure, config):<45} {name:<8} "
                    f"median {statistics.median(samples):>12,.1f} {measure.unit:<8} "
                    f"load {before:.1f} -> {after:.1f}",
                    flush=True,
                )
    return raw


# --- report ----------------------------------------------------------------------------------


def report(raw: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """`results` (Crucible), `baseline` (MLflow), `ratio` and `goals` of the results file."""
    figures: dict[str, dict[str, Any]] = {name: {} for name in raw}
    for name, by_key in raw.items():
        for measure in MEASURES:
            if measure.key in by_key:
                entry = by_key[measure.key]
                figures[name][measure.key] = stats(entry["samples"], measure.unit) | {
                    k: v for k, v in entry.items() if k != "samples"
                }
    ratio, goals = {}, {}
    for measure in MEASURES:
        crucible = figures["Crucible"][measure.key]["median"]
        mlflow = figures["MLflow"][measure.baseline_of or measure.key]["median"]
        ratio[measure.key] = speedup(measure, crucible, mlflow)
        if measure.goal is not None:
            goal = GOALS[measure.goal]
            goals[measure.key] = {"goal": goal, "met": ratio[measure.key] >= goal}
    return {
        "results": figures["Crucible"],
        "baseline": figures["MLflow"],
        "ratio": ratio,
        "goals": goals,
    }


def table(document: dict[str, Any]) -> str:
    results, baseline, ratio = document["results"], document["baseline"], document["ratio"]
    lines = [
        f"{'':<56}{'Crucible':>12}{'MLflow':>12}{'ratio':>8}  "
        f"{'Crucible min-max':<22}{'MLflow min-max':<22}load (1 min) Crucible / MLflow"
    ]
    for measure in MEASURES:
        ours, theirs = results[measure.key], baseline[measure.baseline_of or measure.key]
        goal = document["goals"].get(measure.key)
        verdict = f" (goal {goal['goal']}x: {'met' if goal['met'] else 'MISSED'})" if goal else ""
        lines.append(
            f"{document['labels'][measure.key] + ' (' + measure.unit + ')':<56}"
            f"{ours['median']:>12,}{theirs['median']:>12,}{ratio[measure.key]:>7}x  "
            f"{_span(ours):<22}{_span(theirs):<22}"
            f"{_loads(ours)} / {_loads(theirs)}{verdict}"
        )
    lines.append("ratio: how many times faster Crucible is (its points/s over MLflow's; MLflow's")
    lines.append("time over its own); the 10,000-point ingestion is against MLflow's 1,000-point.")
    return "\n".join(lines)


def _span(figures: dict[str, Any]) -> str:
    return f"{figures['min']:,}-{figures['max']:,}"


def _loads(figures: dict[str, Any]) -> str:
    loads = [x for pair in figures["load_avg_1m"] for x in pair]
    return f"{min(loads)}-{max(loads)}"


def plot(python: Path, document: Path, png: Path) -> None:
    """Drawn by MLflow's venv, which has matplotlib (a dependency of MLflow)."""
    script = Path(__file__).with_name("tracking_vs_mlflow_plot.py")
    subprocess.run([str(python), str(script), str(document), str(png)], check=True)


def crucible_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--", "services", "migrations")
    return git("rev-parse", "HEAD") + (" (with uncommitted changes in services/)" if dirty else "")


def run_machine(
    database_version: dict[str, Any],
    mlflow_version: str,
    load_at_start: tuple[float, float, float],
    load_during_run: dict[str, Any],
) -> dict[str, Any]:
    """The results file's `machine`: metrics_bench.machine's, the versions and the load."""
    return database_version | {
        "mlflow": mlflow_version,
        "crucible_commit": crucible_commit(),
        "shared": "2 cores shared with other jobs; see the load averages",
        "load_avg_at_start": [round(x, 2) for x in load_at_start],
        "load_avg_1m_during_run": load_during_run,
    }


def main() -> None:
    config = parse_args()
    python = ensure_mlflow_venv(MLFLOW_VENV)
    mlflow_version = installed_mlflow_version(python)
    load_at_start = os.getloadavg()
    sampler = LoadSampler()
    token = f"cru_bench-{secrets.token_hex(16)}"
    trackers: dict[str, Tracker]
    with ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tracking-bench-")))
        servers = stack.enter_context(
            both_servers(python, config.database_url, "crucible_bench", config.workers, token, home)
        )
        trackers = {
            "MLflow": Mlflow(servers.mlflow_url, ingest_points=config.mlflow_ingest_points),
            "Crucible": Crucible(
                servers.crucible_url, token, ingest_points=config.crucible_ingest_points
            ),
        }
        print(f"MLflow {mlflow_version} and Crucible serving; seeding both", flush=True)
        with ThreadPoolExecutor(len(trackers)) as pool:
            futures = {name: pool.submit(seed, t, config) for name, t in trackers.items()}
            seeded = {name: future.result() for name, future in futures.items()}
        for name, done in seeded.items():
            print(f"seeded {name} in {done.seconds}", flush=True)
        for url in (servers.mlflow_database, servers.crucible_database):
            vacuum_analyze(url)
        raw = measure_all(trackers, seeded, config)
        database_version = machine(servers.crucible_database)
    load_during_run = sampler.stop()

    document = {
        "name": "tracking_vs_mlflow",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": run_machine(database_version, mlflow_version, load_at_start, load_during_run),
        "config": {
            "workers_each": config.workers,
            "clients": config.clients,
            "repeats": config.repeats,
            "keys_per_ingest_run": config.keys,
            "ingest_points": {
                "MLflow": config.mlflow_ingest_points,
                "Crucible": config.crucible_ingest_points,
            },
            "runs_listed": config.runs,
            "list_page_size": config.page_size,
            "history_points": config.history_points,
            "big_points": config.big_points,
            "chart_points": config.chart_points,
            "read_budget_s_per_repeat": config.read_budget_s,
            "mlflow": {
                "requirements": list(MLFLOW_REQUIREMENTS),
                "server": f"mlflow server --workers {config.workers} "
                "--uvicorn-opts '--no-access-log --timeout-worker-healthcheck 120', "
                "Postgres via psycopg2",
                "history": f"GET /api/2.0/mlflow/metrics/get-history, pages of "
                f"{MLFLOW_HISTORY_PAGE:,}",
                "chart": "GET /ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
                "list": "POST /api/2.0/mlflow/runs/search with a tags filter",
            },
            "crucible": {
                "server": f"crucible server --workers {config.workers}",
                "history": "GET /api/v1/runs/{id}/metrics?keys=...[&max_points=2000]",
                "list": "GET /api/v1/runs?experiment_id=...&tag=key=value",
            },
            "seeding_s": {name: done.seconds for name, done in seeded.items()},
        },
        "labels": {m.key: label(m, config) for m in MEASURES},
        "ratio_means": "how many times faster Crucible is than MLflow (median against median)",
    } | report(raw)
    config.output.parent.mkdir(parents=True, exist_ok=True)
    config.output.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    plot(python, config.output, config.output.with_suffix(".png"))
    print(table(document))
    print(f"wrote {config.output} and {config.output.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
