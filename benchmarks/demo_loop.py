"""The README's demo loop timed as a user runs it: `crucible up` on an empty CRUCIBLE_HOME,
then the loop of `crucible demo` (examples/demo-loop.yaml, 9 runs: teacher data, SFT with an
eval of every checkpoint, rollouts, RL), from the first submission to the last eval's end.

Starts `crucible up` in a subprocess on a free port with a temporary home, follows the loop
with the CLI's own code (`crucible.demo.watch.run_demo`), and writes
benchmarks/results/demo_loop.json: the wall time, the held-out accuracy and loss of every
checkpoint, and the machine's load, which the 2-core figure depends on.

    .venv/bin/python -m benchmarks.demo_loop            # the full loop (about 2.5 minutes)
    .venv/bin/python -m benchmarks.demo_loop --quick    # CI size, results not written
"""

import argparse
import io
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import torch
from rich.console import Console

from crucible.client import CrucibleClient
from crucible.demo.loop import FULL, QUICK
from crucible.demo.watch import run_demo

RESULTS = Path(__file__).parent / "results" / "demo_loop.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_up(
    home: Path, port: int, log: Path, settings: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`crucible up` on `home` with none of this process's CRUCIBLE_* settings, only those
    in `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= (settings or {}) | {"CRUCIBLE_HOME": str(home)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "crucible", "up", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"crucible up exited {process.returncode}; see {log}")
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
            if ready and (home / "token").exists():
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("crucible up was not ready within 180 s")


def checkpoint_scores(api: CrucibleClient, run_id: int) -> dict[str, dict[str, float]]:
    """Step -> the eval's accuracy and loss, for each checkpoint of the run."""
    return {
        str(e.step): {
            "accuracy": round(e.scores["accuracy"], 4),
            "loss": round(e.scores["loss"], 4),
        }
        for e in sorted(api.list_run_evals(run_id), key=lambda e: e.step)
    }


def torch_cpu_machine() -> dict[str, Any]:
    """What a CPU training figure depends on, for a results file's `machine`."""
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        # The CPU's kernels: the same seeds give other losses on another instruction set
        # (ATEN_CPU_CAPABILITY forces one), so a figure is comparable only on the same.
        "cpu": cpu_model(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI-sized loop; no results")
    args = parser.parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="crucible-demo-bench-") as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        process = start_up(home, port, Path(tmp) / "up.log")
        try:
            token = (home / "token").read_text().strip()
            with CrucibleClient(f"http://127.0.0.1:{port}", token) as api:
                started = time.monotonic()
                outcome = run_demo(
                    api,
                    project="default",
                    experiment="demo",
                    size=QUICK if args.quick else FULL,
                    console=Console(file=io.StringIO()),
                )
                wall = time.monotonic() - started
                if not outcome.succeeded:
                    raise SystemExit(f"the loop failed: {outcome.runs}")
                scores = {
                    outcome.runs[stage].name: checkpoint_scores(api, outcome.runs[stage].id)
                    for stage in ("sft", "rl")
                }
                runs = len(api.list_runs(project="default", limit=1000).items)
        finally:
            process.terminate()
            process.wait(30)
    document: dict[str, Any] = {
        "name": "demo_loop",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": torch_cpu_machine()
        | {
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "config": {
            "loop": "quick" if args.quick else "full",
            "how": "crucible up on an empty CRUCIBLE_HOME; the loop of `crucible demo`, "
            "first submission to the last eval's end",
        },
        "results": {"runs": runs, "wall_s": round(wall, 1), "checkpoints": scores},
    }
    print(orjson.dumps(document["results"], option=orjson.OPT_INDENT_2).decode())
    if args.quick:
        return
    RESULTS.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
