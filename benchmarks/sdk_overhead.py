"""What the run SDK costs a training step: a 10 ms step logging 20 metrics, with and without.

Starts `crucible server` (embedded SQLite) in a subprocess, then runs a loop of `--steps`
steps, each a fixed piece of work calibrated to `--step-ms`, logging `--metrics` values per
step through `run.log`, and the same loop without the SDK. Rounds alternate with and without
so that load from elsewhere on the machine hits both alike; medians and quartiles are
reported, with a control (two blocks without the SDK, against each other) that shows how far
apart identical blocks come out on the machine. Two kinds of step work:

- `matmul`: a CPU matmul (torch, one thread), which releases the GIL as GPU-bound steps do;
- `python`: pure-Python arithmetic, which holds the GIL: the SDK's sender thread then competes
  for it, the worst case.

Besides the wall time, the SDK's CPU in the training process is accounted directly: the
training thread's CPU clock across each `run.log` call, less what the same clock reads cost
around nothing (read after every step of the blocks without the SDK too), and the CPU clocks
of the SDK's threads. The wall time inside `run.log` is reported as well; on a loaded machine
it also counts the time other processes had the core. The benchmark checks that every point
arrived.

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
import threading
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
    step: Callable[[], None], steps: int, metrics: int, run: Any, first_step: int = 0
) -> tuple[float, float, float, float]:
    """Seconds for the loop, the median seconds of one step (log included), and the wall and
    the CPU seconds of the training thread inside run.log (without a run: between the same
    clock reads around nothing, what the reads themselves cost)."""
    keys = [f"train/metric_{k:02d}" for k in range(metrics)]
    in_log = in_log_cpu = 0.0
    durations = []
    started = time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        step()
        values = {key: i * 0.001 + k for k, key in enumerate(keys)} if run is not None else {}
        # The same clocks with and without the SDK, so that their cost is not counted as its.
        c = time.thread_time()
        t = time.perf_counter()
        if run is not None:
            run.log(values, step=first_step + i)
        in_log += time.perf_counter() - t
        in_log_cpu += time.thread_time() - c
        durations.append(time.perf_counter() - t0)
    return time.perf_counter() - started, statistics.median(durations), in_log, in_log_cpu


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


def sdk_thread_cpu_s() -> float:
    """CPU seconds used so far by the SDK's background threads (sender and heartbeat): on a
    GIL-bound step, time they hold the interpreter is time the training loop waits."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith("crucible-") and thread.ident is not None:
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


def measure(
    kind: str, args: argparse.Namespace, api: CrucibleClient, url: str, token: str
) -> dict[str, Any]:
    """Rounds of three blocks: without the SDK, with it, without again. A round's overhead is
    the block with the SDK against the mean of the two around it, which cancels a drift in
    the machine's speed that is linear across the round; the two blocks without, against
    each other, are the control: how far apart two identical blocks come out here.

    One run is logged to throughout. After each block with the SDK, `flush()` sends what is
    left (untimed, so the next block starts with nothing pending); the CPU the SDK's threads
    spend in it is added to the block's time, so that no sending escapes the count."""
    step = calibrated_step(kind, args.step_ms)
    loop(step, 50, args.metrics, None)  # warm-up
    run = crucible.init(
        run_id=new_run(api),
        attempt=1,
        api_url=url,
        token=token,
        flush_interval=args.flush_interval,
    )
    overhead, control, blocks = [], [], []
    in_log_share, in_log_cpu_share, clocks_cpu_share, threads_share = [], [], [], []
    first_step = 0
    for _ in range(args.rounds):
        before, _, _, clocks_before = loop(step, args.steps, args.metrics, None)
        cpu_at_start = sdk_thread_cpu_s()
        seconds, _, in_log, in_log_cpu = loop(step, args.steps, args.metrics, run, first_step)
        cpu_in_block = sdk_thread_cpu_s() - cpu_at_start
        first_step += args.steps
        if not run.flush(timeout=60):
            raise SystemExit("the points of a block were not stored within 60 s")
        cpu_in_flush = sdk_thread_cpu_s() - cpu_at_start - cpu_in_block
        with_sdk = seconds + cpu_in_flush
        after, _, _, clocks_after = loop(step, args.steps, args.metrics, None)
        baseline = (before + after) / 2
        overhead.append((with_sdk / baseline - 1) * 100)
        control.append((after / before - 1) * 100)
        in_log_share.append(in_log / baseline * 100)
        in_log_cpu_share.append(in_log_cpu / baseline * 100)
        clocks_cpu_share.append((clocks_before + clocks_after) / 2 / baseline * 100)
        threads_share.append((cpu_in_block + cpu_in_flush) / baseline * 100)
        blocks.append(baseline)
    run.finish()
    keys = api.request("GET", f"/api/v1/runs/{run.id}/metrics/keys")["keys"]
    arrived = sum(k["point_count"] for k in keys)
    expected = args.rounds * args.steps * args.metrics
    if arrived != expected or run.dropped_points:
        raise SystemExit(f"{arrived} of {expected} points arrived ({kind})")

    def summary(values: list[float]) -> dict[str, float]:
        low, median, high = statistics.quantiles(values, n=4)
        return {"median": round(median, 2), "p25": round(low, 2), "p75": round(high, 2)}

    clocks = statistics.median(clocks_cpu_share)
    cpu_accounted = [a - clocks + b for a, b in zip(in_log_cpu_share, threads_share, strict=True)]
    step_us = statistics.median(blocks) / args.steps * 1e6
    return {
        "step_ms_measured": round(statistics.median(blocks) / args.steps * 1000, 3),
        # The headline: what a user sees, the loop's wall time with the SDK against without.
        "overhead_pct": round(statistics.median(overhead), 2),
        "overhead_pct_spread": summary(overhead),
        "control_pct_spread": summary(control),
        # What the SDK itself spends in the training process (the CPU inside `log`, less
        # what the clock reads around it cost, plus its threads' CPU, which a GIL-bound step
        # waits for): the part the SDK's code decides.
        "cpu_accounted_pct": round(statistics.median(cpu_accounted), 3),
        "log_call_cpu_pct_of_step": round(statistics.median(in_log_cpu_share), 3),
        "log_call_cpu_us_mean": round(statistics.median(in_log_cpu_share) / 100 * step_us, 2),
        # The same clock reads around nothing, after each step of the blocks without the SDK.
        "clocks_cpu_us_mean": round(clocks / 100 * step_us, 2),
        # Wall time inside `log`: the CPU above plus any time other processes had the core.
        "log_call_pct_of_step": round(statistics.median(in_log_share), 3),
        "log_call_us_mean": round(statistics.median(in_log_share) / 100 * step_us, 2),
        "sdk_threads_cpu_pct_of_loop": round(statistics.median(threads_share), 3),
        "overhead_pct_per_round": [round(r, 2) for r in overhead],
        "points": expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per block")
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=2.0,
        help="seconds; the SDK's default. A block is two intervals long, and what is left at "
        "its end is sent by the flush after it, whose CPU counts too (so a block sends two "
        "or three batches where a steady loop sends two)",
    )
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
    worst_accounted = max(r["cpu_accounted_pct"] for r in results.values())
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
            "flush_interval_s": args.flush_interval,
            "sdk": "crucible.init() defaults (1,000,000-point buffer, heartbeat every 15 s), "
            "the flush interval as given",
            "design": "rounds of three blocks (without, with, without); overhead = with / mean "
            "of the two without; control = second without / first without",
        },
        "results": {
            "overhead_pct_worst_kind": worst,
            "cpu_accounted_pct_worst_kind": worst_accounted,
            "target_overhead_pct": TARGET_OVERHEAD_PCT,
            "by_step_kind": results,
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    for kind, r in results.items():
        spread, control = r["overhead_pct_spread"], r["control_pct_spread"]
        print(
            f"{kind:>6}: step {r['step_ms_measured']} ms, overhead {r['overhead_pct']}% "
            f"(quartiles {spread['p25']}% to {spread['p75']}% over {args.rounds} rounds; "
            f"control {control['median']}%, {control['p25']}% to {control['p75']}%); "
            f"the SDK's CPU {r['cpu_accounted_pct']}% of the loop (log() "
            f"{r['log_call_cpu_us_mean']} us of CPU a step, of which the clocks "
            f"{r['clocks_cpu_us_mean']} us, {r['log_call_us_mean']} us of wall time; its "
            f"threads {r['sdk_threads_cpu_pct_of_loop']}%)"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
