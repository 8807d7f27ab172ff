"""What the run SDK costs a training step: a 10 ms step logging 20 metrics, with and without.

Starts `crucible server` (embedded SQLite) in a subprocess, then runs a loop of `--steps`
steps, each a fixed piece of work calibrated to `--step-ms`, logging `--metrics` values per
step through `run.log`, and the same loop without the SDK. Rounds alternate with and without
so that load from elsewhere on the machine hits both alike; medians are reported. Two kinds
of step work:

- `matmul`: a CPU matmul (torch, one thread), which releases the GIL as GPU-bound steps do;
- `python`: pure-Python arithmetic, which holds the GIL: the SDK's sender thread then competes
  for it, the worst case.

The loop's time excludes `run.finish()` (the final drain, after training); it is reported
apart, and the benchmark checks that every point arrived.

    .venv/bin/python benchmarks/sdk_overhead.py
"""

import argparse
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import torch

import crucible
from crucible.client import CrucibleClient
from crucible.schemas.runs import AttemptStart, RunSubmit

RESULTS = Path(__file__).parent / "results" / "sdk_overhead.json"
TARGET_OVERHEAD_PCT = 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(home: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= {"CRUCIBLE_HOME": str(home), "CRUCIBLE_ADMIN_TOKEN": token}
    process = subprocess.Popen(
        [sys.executable, "-m", "crucible", "server", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("crucible server did not start within 180 s")


def calibrated_step(kind: str, step_ms: float) -> Callable[[], None]:
    """A function that takes about step_ms when the machine is idle."""
    if kind == "matmul":
        torch.set_num_threads(1)
        a, b = torch.randn(128, 128), torch.randn(128, 128)

        def unit() -> None:
            torch.mm(a, b)
    else:

        def unit() -> None:
            total = 0
            for i in range(1000):
                total += i * i

    repeats = 1
    while True:
        started = time.perf_counter()
        for _ in range(repeats):
            unit()
        elapsed = time.perf_counter() - started
        if elapsed > 0.2:
            break
        repeats *= 2
    per_step = max(1, round(repeats * step_ms / 1000 / elapsed))

    def step() -> None:
        for _ in range(per_step):
            unit()

    return step


def loop(
    step: Callable[[], None], steps: int, metrics: int, run: Any
) -> tuple[float, float, float]:
    """Seconds for the loop, the median seconds of one step (log included), and seconds
    spent inside run.log."""
    keys = [f"train/metric_{k:02d}" for k in range(metrics)]
    in_log = 0.0
    durations = []
    started = time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        step()
        if run is not None:
            values = {key: i * 0.001 + k for k, key in enumerate(keys)}
            t = time.perf_counter()
            run.log(values, step=i)
            in_log += time.perf_counter() - t
        durations.append(time.perf_counter() - t0)
    return time.perf_counter() - started, statistics.median(durations), in_log


def new_run(api: CrucibleClient) -> int:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": f"bench-{uuid.uuid4().hex[:8]}"},
        "spec": {"experiment": "sdk-overhead"},
    }
    run = api.submit_run(RunSubmit.model_validate({"project": "default", "manifest": manifest}))
    api.start_attempt(run.id, AttemptStart())
    return run.id


def measure(
    kind: str, args: argparse.Namespace, api: CrucibleClient, url: str, token: str
) -> dict[str, Any]:
    step = calibrated_step(kind, args.step_ms)
    loop(step, 50, args.metrics, None)  # warm-up
    without, with_sdk, log_share, finish_s = [], [], [], []
    step_without, step_with = [], []
    for _ in range(args.rounds):
        seconds, median_step, _ = loop(step, args.steps, args.metrics, None)
        without.append(seconds)
        step_without.append(median_step)
        run_id = new_run(api)
        run = crucible.init(run_id=run_id, attempt=1, api_url=url, token=token)
        seconds, median_step, in_log = loop(step, args.steps, args.metrics, run)
        with_sdk.append(seconds)
        step_with.append(median_step)
        log_share.append(in_log)
        started = time.perf_counter()
        run.finish()
        finish_s.append(time.perf_counter() - started)
        keys = api.request("GET", f"/api/v1/runs/{run_id}/metrics/keys")["keys"]
        arrived = sum(k["point_count"] for k in keys)
        expected = args.steps * args.metrics
        if arrived != expected or run.dropped_points:
            raise SystemExit(f"{arrived} of {expected} points arrived ({kind})")
    base, sdk = statistics.median(without), statistics.median(with_sdk)
    return {
        "step_ms_measured": round(base / args.steps * 1000, 3),
        "loop_s_without_sdk": round(base, 3),
        "loop_s_with_sdk": round(sdk, 3),
        "overhead_pct": round((sdk - base) / base * 100, 2),
        "median_step_overhead_pct": round(
            (statistics.median(step_with) / statistics.median(step_without) - 1) * 100, 2
        ),
        "overhead_pct_per_round": [
            round((w - b) / b * 100, 2) for w, b in zip(with_sdk, without, strict=True)
        ],
        "log_call_us_mean": round(statistics.median(log_share) / args.steps * 1e6, 2),
        "log_call_pct_of_step": round(statistics.median(log_share) / base * 100, 3),
        "finish_drain_s": round(statistics.median(finish_s), 3),
        "points_per_round": args.steps * args.metrics,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="matmul,python")
    args = parser.parse_args()

    token = "cru_" + secrets.token_urlsafe(24)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as home:
        process, url = start_server(Path(home) / "server", token)
        os.environ["CRUCIBLE_HOME"] = str(Path(home) / "workload")
        try:
            with CrucibleClient(url, token) as api:
                results = {
                    kind: measure(kind, args, api, url, token) for kind in args.kinds.split(",")
                }
        finally:
            process.terminate()
            process.wait(10)
    worst = max(r["overhead_pct"] for r in results.values())
    document = {
        "name": "sdk_overhead",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "config": {
            "steps": args.steps,
            "step_ms": args.step_ms,
            "metrics_per_step": args.metrics,
            "rounds": args.rounds,
            "server": "crucible server subprocess, embedded SQLite, same machine",
            "sdk": "crucible.init() defaults: 1,000,000-point buffer, 2 s flush interval, "
            "heartbeat every 15 s",
        },
        "results": {
            "overhead_pct_worst_kind": worst,
            "target_overhead_pct": TARGET_OVERHEAD_PCT,
            "by_step_kind": results,
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    for kind, r in results.items():
        print(
            f"{kind:>6}: step {r['step_ms_measured']} ms, overhead {r['overhead_pct']}% "
            f"(rounds {r['overhead_pct_per_round']}; "
            f"median step {r['median_step_overhead_pct']}%), "
            f"log() {r['log_call_us_mean']} us "
            f"= {r['log_call_pct_of_step']}% of a step"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
