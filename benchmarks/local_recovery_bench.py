"""Recovery and eval-trigger latency of the embedded mode (`crucible up`: local executor and
in-process workers on SQLite).

- Preemption: one TrainingRun whose process drains on SIGTERM (exit 143) is preempted
  `--preemptions` times through the API; each time, from the interrupted attempt's end (the
  interruption observed) to the next attempt's start (its process launched), as the API
  records them.
- Eval trigger: `--checkpoints` checkpoints registered on a run with an eval policy; from each
  checkpoint's registration to its EvalJob's creation (the EvalJobs ask for a GPU the
  executor does not have, so they are created and refused, never run).

The Kubernetes half (100 preemptions on the test cluster, replacement pods) is
`python -m benchmarks.operator_bench recovery`.

    .venv/bin/python benchmarks/local_recovery_bench.py
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

RESULTS = Path(__file__).parent / "results" / "local_recovery.json"
DRAINS = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
    "while True: time.sleep(0.05)\n"
)


def start_up(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= {"CRUCIBLE_HOME": str(home)}
    process = subprocess.Popen(
        [sys.executable, "-m", "crucible", "up", "--port", str(port)],
        env=env,
        stdout=(home.parent / "up.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("crucible up did not start")


def wait(check: Any, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("timed out")


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_s": round(statistics.median(ordered), 3),
        "p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "max_s": round(ordered[-1], 3),
        "min_s": round(ordered[0], 3),
    }


def bench_preemptions(api: httpx.Client, count: int) -> list[float]:
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": "drains"},
        "spec": {
            "experiment": "bench",
            "command": [sys.executable, "-c", DRAINS],
            "recovery": {"maxInterruptions": count + 10, "backoffSeconds": 0},
        },
    }
    run = api.post("/api/v1/runs", json={"project": "default", "manifest": manifest}).json()
    path = f"/api/v1/runs/{run['id']}"
    latencies = []
    for number in range(1, count + 1):
        wait(
            lambda n=number: (
                api.get(path).json()["attempt_count"] == n
                and api.get(path).json()["phase"] == "Running"
            )
        )
        assert api.post(f"{path}/preempt").status_code == 200
        attempts = wait(
            lambda n=number: (a := api.get(f"{path}/attempts").json()) and len(a) > n and a
        )
        latencies.append(at(attempts[number]["started_at"]) - at(attempts[number - 1]["ended_at"]))
    api.post(f"{path}/cancel")
    return latencies


def bench_eval_triggers(api: httpx.Client, count: int) -> list[float]:
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": "writes-checkpoints"},
        "spec": {
            "experiment": "bench",
            "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
            # One GPU each, on a machine the executor sees none of: the EvalJobs are created
            # (what this measures) and then fail Unschedulable instead of running an eval.
            "evals": [{"suite": "noop", "gpus": 1}],
        },
    }
    run = api.post("/api/v1/runs", json={"project": "default", "manifest": manifest}).json()
    path = f"/api/v1/runs/{run['id']}"
    latencies = []
    for step in range(1, count + 1):
        body = {
            "step": step,
            "uri": f"s3://bench/{step}",
            "size_bytes": 1,
            "digest": "sha256:" + f"{step:064x}",
        }
        checkpoint = api.post(f"{path}/checkpoints", json=body).json()
        eval_run = wait(
            lambda c=checkpoint: next(
                (
                    r
                    for r in api.get("/api/v1/runs", params={"kind": "eval", "limit": 1000}).json()[
                        "items"
                    ]
                    if r["manifest"]["spec"]["checkpoint"].get("id") == c["id"]
                ),
                None,
            )
        )
        latencies.append(at(eval_run["created_at"]) - at(checkpoint["created_at"]))
    api.post(f"{path}/cancel")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preemptions", type=int, default=100)
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--port", type=int, default=18181)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        process = start_up(home, args.port)
        try:
            token = (home / "token").read_text().strip()
            api = httpx.Client(
                base_url=f"http://127.0.0.1:{args.port}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            recovery = bench_preemptions(api, args.preemptions)
            triggers = bench_eval_triggers(api, args.checkpoints)
        finally:
            process.terminate()
            process.wait(30)
    result = {
        "name": "local_recovery",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
        },
        "config": {"backend": "local (crucible up, SQLite)", **vars(args)},
        "results": {
            "interruption_to_next_attempt": percentiles(recovery),
            "checkpoint_to_eval_job": percentiles(triggers),
        },
        "targets": {"recovery_p99_s": 5.0, "eval_trigger_p99_s": 2.0},
    }
    RESULTS.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(result["results"], option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
