"""MLflow's own client against Crucible's MLflow API and against MLflow's server (issue 26).

The same `MlflowClient` (the pinned mlflow of benchmarks/tracking_vs_mlflow.py, in
.bench/mlflow-venv) talks to `mlflow server` and to `crucible server`'s `/mlflow`, the two
started with the same number of workers, each on a fresh database of the Postgres server in
CRUCIBLE_DATABASE_URL. Both are seeded through the client (untimed); then, alternating which
server goes first, `--repeats` times:

- ingestion: `--clients` processes, each logging to a run of its own with
  `MlflowClient().log_batch` in 1,000-metric batches (MLflow's maximum), all starting
  together; points/s over all clients, from the first call to the last answer;
- history: one `--history-points`-point metric read whole with
  `MlflowClient().get_metric_history` (which pages as the client does); seconds and points/s.

Every figure is what the client sees: its own code path, the HTTP and the server. The client
processes are benchmarks/mlflow_api_vs_mlflow_client.py. Writes
benchmarks/results/mlflow_api_vs_mlflow.json and prints the figures with the ratios (how many
times faster Crucible is). Stops both servers and drops both databases at the end.

    eval "$(scripts/services up)"
    .venv/bin/python -m benchmarks.mlflow_api_vs_mlflow
"""

import argparse
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
from benchmarks.metrics_bench import LoadSampler, machine
from benchmarks.tracking_vs_mlflow import (
    MLFLOW_BATCH,
    MLFLOW_REQUIREMENTS,
    MLFLOW_VENV,
    both_servers,
    ensure_mlflow_venv,
    ingest_batches,
    installed_mlflow_version,
    metric_points,
    run_machine,
    stats,
    vacuum_analyze,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CLIENT = Path(__file__).with_name("mlflow_api_vs_mlflow_client.py")
SYSTEMS = ("MLflow", "Crucible")
MEASURES = {"ingest": "points/s", "history": "ms"}
GOALS = {"ingest": 10, "history": 10}
EXPERIMENT = "mlflow-client-bench"
HISTORY_KEY = "history"
PROJECT = "bench"  # Crucible's project, reached with an editor token of its own


@dataclass(frozen=True)
class Config:
    database_url: str
    workers: int
    clients: int
    repeats: int
    points: int
    keys: int
    history_points: int
    output: Path


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("CRUCIBLE_DATABASE_URL"))
    parser.add_argument("--workers", type=int, default=4, help="server processes, each system")
    parser.add_argument("--clients", type=int, default=8, help="concurrent ingestion clients")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--points",
        type=int,
        default=20_000,
        help=f"points each ingestion client logs, a multiple of {MLFLOW_BATCH:,}",
    )
    parser.add_argument("--keys", type=int, default=10, help="metric keys in each batch")
    parser.add_argument("--history-points", type=int, default=100_000)
    parser.add_argument("--output", type=Path, default=RESULTS / "mlflow_api_vs_mlflow.json")
    args = parser.parse_args(argv)
    if not (args.database_url or "").startswith("postgresql"):
        parser.error('no Postgres URL in CRUCIBLE_DATABASE_URL: eval "$(scripts/services up)"')
    if args.points <= 0 or args.points % MLFLOW_BATCH:
        parser.error(f"--points {args.points} is not a positive multiple of {MLFLOW_BATCH:,}")
    if args.keys <= 0 or MLFLOW_BATCH % args.keys:
        parser.error(f"--keys {args.keys} does not divide a batch of {MLFLOW_BATCH:,}")
    if min(args.workers, args.clients, args.repeats, args.history_points) <= 0:
        parser.error("--workers, --clients, --repeats and --history-points must be positive")
    return Config(
        database_url=args.database_url,
        workers=args.workers,
        clients=args.clients,
        repeats=args.repeats,
        points=args.points,
        keys=args.keys,
        history_points=args.history_points,
        output=args.output,
    )


# --- the client processes --------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A server as the MLflow client reaches it: only MLFLOW_* variables differ."""

    name: str
    env: dict[str, str]


@dataclass(frozen=True)
class Seeded:
    history_run: str
    ingest_runs: list[str]
    seconds: float


class Client:
    """One process of the client script under MLflow's python, its job already sent."""

    def __init__(
        self, python: Path, target: Target, command: str, job: dict[str, Any], log: Path
    ) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CRUCIBLE_", "MLFLOW_"))}
        self.log = log
        with log.open("w") as errors:
            self.process = subprocess.Popen(
                [str(python), str(CLIENT), command],
                env=base | {"PYTHONNOUSERSITE": "1"} | target.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        self.what = f"{command} client of {target.name}"
        self._stdin().write(orjson.dumps(job).decode() + "\n")
        self._stdin().flush()
        if command != "ingest":  # only ingestion waits for a `go`
            self._stdin().close()

    def _stdin(self) -> IO[str]:
        assert self.process.stdin is not None
        return self.process.stdin

    def answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            tail = self.log.read_text()[-3000:]
            raise RuntimeError(f"the {self.what} exited {self.process.returncode}:\n{tail}")
        return line.strip()

    def go(self) -> None:
        self._stdin().write("go\n")
        self._stdin().close()

    def result(self) -> Any:
        answer = orjson.loads(self.answer())
        self.process.wait()
        return answer


def seed(python: Path, target: Target, config: Config, home: Path) -> Seeded:
    """The history run and every ingestion run, through the client (untimed)."""
    started = time.monotonic()
    job = {
        "experiment": EXPERIMENT,
        "history": metric_points(HISTORY_KEY, 0, config.history_points),
        "threads": config.clients,
        "ingest_runs": config.repeats * config.clients,
    }
    done = Client(python, target, "setup", job, home / f"setup-{target.name}.log").result()
    return Seeded(done["history_run"], done["ingest_runs"], round(time.monotonic() - started, 1))


def measure_ingest(
    python: Path, target: Target, runs: list[str], config: Config, home: Path
) -> float:
    """Points/s from one client process per run, each logging config.points points, from the
    first client's first call to the last client's last answer."""
    batches = ingest_batches(config.points, MLFLOW_BATCH, config.keys)
    clients = [
        Client(
            python,
            target,
            "ingest",
            {"run_id": run, "batches": batches},
            home / f"ingest-{target.name}-{i}.log",
        )
        for i, run in enumerate(runs)
    ]
    for client in clients:
        if client.answer() != "ready":
            raise RuntimeError(f"the {client.what} did not answer `ready`")
    for client in clients:
        client.go()
    done = [client.result() for client in clients]
    per_key = config.points // config.keys
    if any(d["first_key_stored"] != per_key for d in done):
        stored = [d["first_key_stored"] for d in done]
        raise RuntimeError(f"{target.name} stored {stored} points of a key, not {per_key}")
    span = max(d["ended"] for d in done) - min(d["started"] for d in done)
    return float(sum(d["points"] for d in done) / span)


def measure_history(
    python: Path, target: Target, seeded: Seeded, config: Config, home: Path
) -> float:
    """Milliseconds to read the whole history, as the client reads it."""
    job = {"run_id": seeded.history_run, "key": HISTORY_KEY}
    done = Client(python, target, "history", job, home / f"history-{target.name}.log").result()
    if done["points"] != config.history_points:
        raise RuntimeError(f"{target.name} returned {done['points']} points of history")
    return 1000 * float(done["seconds"])


def measure_all(
    python: Path, targets: dict[str, Target], seeded: dict[str, Seeded], config: Config, home: Path
) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Per system and measure the samples and the 1-minute load average before and after
    each, every repeat alternating which system goes first."""
    raw: dict[str, dict[str, dict[str, list[Any]]]] = {
        name: {key: {"samples": [], "load_avg_1m": []} for key in MEASURES} for name in targets
    }
    for repeat in range(config.repeats):
        order = SYSTEMS if repeat % 2 == 0 else SYSTEMS[::-1]
        for key, unit in MEASURES.items():
            for name in order:
                before = os.getloadavg()[0]
                if key == "ingest":
                    runs = seeded[name].ingest_runs[repeat * config.clients :][: config.clients]
                    sample = measure_ingest(python, targets[name], runs, config, home)
                else:
                    sample = measure_history(python, targets[name], seeded[name], config, home)
                after = os.getloadavg()[0]
                raw[name][key]["samples"].append(sample)
                raw[name][key]["load_avg_1m"].append([round(before, 2), round(after, 2)])
                print(
                    f"repeat {repeat + 1}/{config.repeats} {key:<8} {name:<8} "
                    f"{sample:>12,.1f} {unit:<8} load {before:.1f} -> {after:.1f}",
                    flush=True,
                )
    return raw


# --- report ----------------------------------------------------------------------------------


def report(raw: dict[str, dict[str, dict[str, list[Any]]]], history_points: int) -> dict[str, Any]:
    """`results` (Crucible), `baseline` (MLflow), `ratio` and `goals` of the results file:
    per measure the median, min, max and every sample; a history also as points/s."""
    figures: dict[str, dict[str, Any]] = {}
    for name in SYSTEMS:
        figures[name] = {}
        for key, unit in MEASURES.items():
            entry = raw[name][key]
            figures[name][key] = stats(entry["samples"], unit) | {
                "each": [round(x, 1) for x in entry["samples"]],
                "load_avg_1m": entry["load_avg_1m"],
            }
        history = figures[name]["history"]
        history["points_per_s"] = round(history_points / (history["median"] / 1000))
    crucible, mlflow = figures["Crucible"], figures["MLflow"]
    ratio = {
        "ingest": round(crucible["ingest"]["median"] / mlflow["ingest"]["median"], 2),
        "history": round(mlflow["history"]["median"] / crucible["history"]["median"], 2),
    }
    goals = {key: {"goal": goal, "met": ratio[key] >= goal} for key, goal in GOALS.items()}
    return {"results": crucible, "baseline": mlflow, "ratio": ratio, "goals": goals}


def table(document: dict[str, Any]) -> str:
    config = document["config"]
    rows = {
        "ingest": f"log_batch, {config['clients']} clients (points/s)",
        "history": f"get_metric_history, {config['history_points']:,} points (s)",
    }
    lines = [
        f"{'':<44}{'Crucible':>12}{'MLflow':>12}{'ratio':>9}  "
        f"{'Crucible min-max':<20}{'MLflow min-max':<20}"
    ]
    for key, what in rows.items():
        ours, theirs = document["results"][key], document["baseline"][key]
        goal = document["goals"][key]
        verdict = f"goal {goal['goal']}x: {'met' if goal['met'] else 'MISSED'}"
        lines.append(
            f"{what:<44}{_shown(key, ours['median']):>12}{_shown(key, theirs['median']):>12}"
            f"{document['ratio'][key]:>8}x  {_span(key, ours):<20}{_span(key, theirs):<20}"
            f"{verdict}"
        )
    ours, theirs = document["results"]["history"], document["baseline"]["history"]
    lines.append(
        f"{'get_metric_history (points/s)':<44}"
        f"{ours['points_per_s']:>12,}{theirs['points_per_s']:>12,}"
    )
    lines.append("ratio: how many times faster Crucible is, median against median")
    return "\n".join(lines)


def _shown(key: str, value: float) -> str:
    return f"{value:,}" if key == "ingest" else f"{value / 1000:,.2f}"


def _span(key: str, figures: dict[str, Any]) -> str:
    return f"{_shown(key, figures['min'])}-{_shown(key, figures['max'])}"


# --- the run ---------------------------------------------------------------------------------


def project_token(url: str, admin_token: str) -> str:
    """An editor token of PROJECT, made with the admin token: MLflow's requests name no
    project, so a project token says which."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        client.post("/api/v1/projects", json={"name": PROJECT}).raise_for_status()
        body = {"name": "mlflow-bench", "project": PROJECT, "role": "editor"}
        response = client.post("/api/v1/tokens", json=body)
        response.raise_for_status()
        token: str = response.json()["token"]
        return token


def main() -> None:
    config = parse_args()
    python = ensure_mlflow_venv(MLFLOW_VENV)
    mlflow_version = installed_mlflow_version(python)
    load_at_start = os.getloadavg()
    sampler = LoadSampler()
    admin_token = f"cru_bench-{secrets.token_hex(16)}"
    with ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mlflow-api-bench-")))
        servers = stack.enter_context(
            both_servers(
                python,
                config.database_url,
                "crucible_bench_mlflow_api",
                config.workers,
                admin_token,
                home,
            )
        )
        crucible_token = project_token(servers.crucible_url, admin_token)
        targets = {
            "MLflow": Target("MLflow", {"MLFLOW_TRACKING_URI": servers.mlflow_url}),
            "Crucible": Target(
                "Crucible",
                {
                    "MLFLOW_TRACKING_URI": f"{servers.crucible_url}/mlflow",
                    "MLFLOW_TRACKING_TOKEN": crucible_token,
                },
            ),
        }
        print(f"MLflow {mlflow_version} and Crucible serving; seeding both", flush=True)
        with ThreadPoolExecutor(len(targets)) as pool:
            futures = {
                name: pool.submit(seed, python, target, config, home)
                for name, target in targets.items()
            }
            seeded = {name: future.result() for name, future in futures.items()}
        for name, done in seeded.items():
            print(f"seeded {name} in {done.seconds} s", flush=True)
        for url in (servers.mlflow_database, servers.crucible_database):
            vacuum_analyze(url)
        raw = measure_all(python, targets, seeded, config, home)
        database_version = machine(servers.crucible_database)
    load_during_run = sampler.stop()

    document = {
        "name": "mlflow_api_vs_mlflow",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": run_machine(database_version, mlflow_version, load_at_start, load_during_run),
        "config": {
            "workers_each": config.workers,
            "clients": config.clients,
            "repeats": config.repeats,
            "points_per_client": config.points,
            "keys_per_batch": config.keys,
            "batch": MLFLOW_BATCH,
            "history_points": config.history_points,
            "client": {
                "requirements": list(MLFLOW_REQUIREMENTS),
                "ingest": "MlflowClient().log_batch(run_id, metrics=[1,000 Metric])",
                "history": "MlflowClient().get_metric_history(run_id, key)",
            },
            "mlflow": f"mlflow server --workers {config.workers} "
            "--uvicorn-opts '--no-access-log --timeout-worker-healthcheck 120', "
            "Postgres via psycopg2; MLFLOW_TRACKING_URI=http://127.0.0.1:PORT",
            "crucible": f"crucible server --workers {config.workers}; "
            "MLFLOW_TRACKING_URI=http://127.0.0.1:PORT/mlflow, "
            "MLFLOW_TRACKING_TOKEN=<an editor token of its project>",
            "seeding_s": {name: done.seconds for name, done in seeded.items()},
        },
        "ratio_means": "how many times faster Crucible is than MLflow (median against median)",
    } | report(raw, config.history_points)
    config.output.parent.mkdir(parents=True, exist_ok=True)
    config.output.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    print(table(document))
    print(f"wrote {config.output}")


if __name__ == "__main__":
    main()
