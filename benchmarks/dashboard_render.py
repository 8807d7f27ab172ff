"""Time to first render of the dashboard's runs table and run chart at scale (issue 7).

A `crucible server` on SQLite in a temporary home serves the built dashboard at `/`, seeded
through the API with 10,000 runs in one experiment and a 1,000,000-point metric on one of
them. `web/e2e/render.bench.mjs` then opens, in Debian's headless Chromium, the experiment
page (until the first row of the runs table is drawn) and the run page (until the loss chart's
canvas has ink), each from a cold page load and again by in-app navigation, several times.

    .venv/bin/python benchmarks/dashboard_render.py     # needs web/node_modules and chromium
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
RESULTS = Path(__file__).parent / "results" / "dashboard_render.json"
API = "/api/v1"


def start_server(home: Path, port: int, dist: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env |= {"CRUCIBLE_HOME": str(home), "CRUCIBLE_WEB_DIR": str(dist)}
    process = subprocess.Popen(
        [sys.executable, "-m", "crucible", "server", "--port", str(port)],
        env=env,
        stdout=(home.parent / "server.log").open("w"),
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
    raise RuntimeError("crucible server did not start")


def seed(url: str, token: str, runs: int, points: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}

    def manifest(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": name},
            "spec": {"experiment": "scale", "config": {"lr": 1e-3}},
        }

    started = time.monotonic()
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        big = client.post(
            f"{API}/runs", json={"project": "default", "manifest": manifest("million")}
        ).json()
        batch = 10_000
        for first in range(0, points, batch):
            body = {
                "points": [
                    {"key": "train/loss", "step": s, "value": 2 * math.exp(-s / 2e5) + 0.1}
                    for s in range(first, min(first + batch, points))
                ]
            }
            response = client.post(f"{API}/runs/{big['id']}/metrics", json=body)
            response.raise_for_status()
    metric_s = time.monotonic() - started

    def submit(index: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for i in range(index, runs - 1, 4):
                body = {"project": "default", "manifest": manifest(f"sweep-{i:05d}")}
                client.post(f"{API}/runs", json=body).raise_for_status()

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(submit, range(4)))
    return {
        "run_id": big["id"],
        "experiment_id": big["experiment_id"],
        "seed_metric_s": round(metric_s, 1),
        "seed_runs_s": round(time.monotonic() - started, 1),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values), 1),
        "min_ms": round(min(values), 1),
        "max_ms": round(max(values), 1),
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        dist = Path(tmp) / "dist"
        subprocess.run(
            [str(WEB / "node_modules" / ".bin" / "vite"), "build", f"--outDir={dist}"],
            cwd=WEB,
            check=True,
            capture_output=True,
        )
        home = Path(tmp) / "home"
        port = 18_000 + os.getpid() % 1000
        server = start_server(home, port, dist)
        try:
            url = f"http://127.0.0.1:{port}"
            token = (home / "token").read_text().strip()
            seeded = seed(url, token, args.runs, args.points)
            print(f"seeded: {seeded}", flush=True)
            load = os.getloadavg()[0]
            bench = subprocess.run(
                ["node", str(WEB / "e2e" / "render.bench.mjs")],
                cwd=WEB,
                env={
                    **os.environ,
                    "BASE_URL": url,
                    "TOKEN": token,
                    "RUN_ID": str(seeded["run_id"]),
                    "EXPERIMENT_ID": str(seeded["experiment_id"]),
                    "REPEAT": str(args.repeat),
                },
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if bench.returncode != 0:
                raise SystemExit(bench.stdout + bench.stderr)
            timings = json.loads(bench.stdout.strip().splitlines()[-1])
        finally:
            server.terminate()
            server.wait(10)

    results = {name: summary(values) for name, values in timings.items()}
    result = {
        "name": "dashboard_render",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_1m_at_start": round(load, 2),
            "browser": "Debian chromium, headless, --disable-gpu",
        },
        "config": {
            "runs": args.runs,
            "metric_points": args.points,
            "repeat": args.repeat,
            "database": "SQLite (crucible server, embedded)",
            **seeded,
        },
        "target_ms": 1000,
        "results": results,
    }
    RESULTS.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
