"""One MLflow client process of benchmarks/mlflow_api_vs_mlflow.py: the real `MlflowClient`,
run by MLflow's venv, against whichever server MLFLOW_TRACKING_URI (and, for Crucible,
MLFLOW_TRACKING_TOKEN) names. Nothing here knows which server that is.

    .bench/mlflow-venv/bin/python benchmarks/mlflow_api_vs_mlflow_client.py setup|ingest|history

Reads its job as one JSON line on stdin and answers one JSON line on stdout. `ingest` first
answers `ready` once its batches are built and its connection is open, then waits for a
line on stdin, so that every client starts together and none is timed importing MLflow.
Points arrive as [key, step, value, time in s].
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

from mlflow.entities import Metric

from mlflow import MlflowClient

BATCH = 1_000  # MLflow's MAX_METRICS_PER_BATCH


def metrics(points: list[list[Any]]) -> list[Metric]:
    return [Metric(key=k, value=v, timestamp=int(t * 1000), step=s) for k, s, v, t in points]


def setup(client: MlflowClient, job: dict[str, Any]) -> dict[str, Any]:
    """An experiment, a run holding the history to read (sent by `threads` threads at once),
    and the empty runs the ingestion clients will log to."""
    experiment = client.create_experiment(job["experiment"])
    history_run = client.create_run(experiment).info.run_id
    history = metrics(job["history"])
    batches = [history[i : i + BATCH] for i in range(0, len(history), BATCH)]
    with ThreadPoolExecutor(job["threads"]) as pool:
        list(pool.map(lambda batch: client.log_batch(history_run, metrics=batch), batches))
    runs = [client.create_run(experiment).info.run_id for _ in range(job["ingest_runs"])]
    return {"experiment_id": experiment, "history_run": history_run, "ingest_runs": runs}


def ingest(client: MlflowClient, job: dict[str, Any], answer: TextIO) -> dict[str, Any]:
    """Times log_batch over the job's batches; then, untimed, how many points of the first
    key the server gives back, so that a server dropping points cannot look fast."""
    run_id = job["run_id"]
    batches = [metrics(batch) for batch in job["batches"]]
    client.get_run(run_id)  # the connection, outside the clock
    print("ready", file=answer, flush=True)
    sys.stdin.readline()
    started = time.monotonic()  # CLOCK_MONOTONIC: comparable across the client processes
    for batch in batches:
        client.log_batch(run_id, metrics=batch)
    ended = time.monotonic()
    first_key = batches[0][0].key
    return {
        "started": started,
        "ended": ended,
        "points": sum(len(batch) for batch in batches),
        "first_key_stored": len(client.get_metric_history(run_id, first_key)),
    }


def history(client: MlflowClient, job: dict[str, Any]) -> dict[str, Any]:
    """One whole history, read as the client reads it (it pages when the server does)."""
    client.get_run(job["run_id"])  # the connection, outside the clock
    started = time.perf_counter()
    points = client.get_metric_history(job["run_id"], job["key"])
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "points": len(points)}


def main(command: str) -> None:
    # MLflow may print; the answers are the only lines on the real stdout.
    answer, sys.stdout = sys.stdout, sys.stderr
    job = json.loads(sys.stdin.readline())
    client = MlflowClient()
    if command == "setup":
        result = setup(client, job)
    elif command == "ingest":
        result = ingest(client, job, answer)
    elif command == "history":
        result = history(client, job)
    else:
        raise SystemExit(f"unknown command {command!r}: use setup, ingest or history")
    print(json.dumps(result), file=answer, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
