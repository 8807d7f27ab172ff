"""ASHA against the full grid, through the platform as a user runs it: `crucible up` on an
empty CRUCIBLE_HOME, the teacher of examples/train-and-eval.yaml, then the same 32-trial
grid over the SFT run's learning rate and batch size twice, once with early stopping and
once without, alternated, `--samples` times each.

The cost is the trials' device time: each trial run's wall time from its start to its end
as the control plane recorded it (`started_at` to `finished_at`), summed; on this machine
the device is the CPU, and the trials run one at a time, so it is the time a GPU would be
held for them. For each sweep: that sum, the same up to the end of the trial that turned
out best (the issue's "time to the best trial"), the sweep's wall time, and the best trial
with its final loss; the grid's best is the reference the ASHA sweep should find.

    .venv/bin/python -m benchmarks.sweep_asha                 # 3 samples of 270 steps (~20 min)
    .venv/bin/python -m benchmarks.sweep_asha --samples 1 --steps 2700   # longer trials
    .venv/bin/python -m benchmarks.sweep_asha --samples 1 --steps 60 --quick   # a smoke run
"""

import argparse
import copy
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import torch
import yaml
from benchmarks.demo_loop import cpu_model, free_port, start_up

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase

RESULTS = Path(__file__).parent / "results"
EXAMPLES = Path(__file__).parents[1] / "examples"
LEARNING_RATES = [3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5]
BATCH_SIZES = [8, 16, 32, 64]


def sweep_manifest(name: str, steps: int, *, asha: bool, quick: bool) -> dict[str, Any]:
    """The grid of examples/sweep.yaml's run over LEARNING_RATES x BATCH_SIZES."""
    base = yaml.safe_load((EXAMPLES / "sweep.yaml").read_text())
    run = copy.deepcopy(base["spec"]["run"])
    run["config"]["train"]["steps"] = steps
    run["checkpoints"] = {"everySteps": steps}
    lrs = LEARNING_RATES[:2] if quick else LEARNING_RATES
    sizes = BATCH_SIZES[:2] if quick else BATCH_SIZES
    spec: dict[str, Any] = {
        "method": "grid",
        "metric": {"name": "loss", "goal": "minimize"},
        "budget": {"trials": len(lrs) * len(sizes), "concurrency": 1},
        "parameters": {
            "config.train.lr": {"values": lrs},
            "config.train.batch_size": {"values": sizes},
        },
        "run": run,
    }
    if asha:
        spec["earlyStopping"] = {"minSteps": steps // 27, "maxSteps": steps, "reductionFactor": 3}
    return {
        "apiVersion": base["apiVersion"],
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_teacher_data(api: CrucibleClient) -> None:
    teacher = next(
        d
        for d in yaml.safe_load_all((EXAMPLES / "train-and-eval.yaml").read_text())
        if d["kind"] == "RolloutJob"
    )
    run = api.request("POST", "/api/v1/runs", json={"project": "default", "manifest": teacher})
    while True:
        phase = Phase(api.request("GET", f"/api/v1/runs/{run['id']}")["phase"])
        if phase.is_terminal:
            if phase is not Phase.Succeeded:
                raise SystemExit(f"the teacher ended {phase}")
            return
        time.sleep(1)


def run_sweep(api: CrucibleClient, manifest: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    sweep = api.request("POST", "/api/v1/sweeps", json={"project": "default", "manifest": manifest})
    while not Phase(sweep["phase"]).is_terminal:
        time.sleep(1)
        sweep = api.request("GET", f"/api/v1/sweeps/{sweep['id']}")
    wall = time.monotonic() - started
    if sweep["phase"] != "Succeeded":
        raise SystemExit(f"sweep {sweep['name']} ended {sweep['phase']}: {sweep['message']}")
    spans = []
    for trial in sweep["trials"]:
        run = api.request("GET", f"/api/v1/runs/{trial['run_id']}")
        begun = datetime.fromisoformat(run["started_at"] or run["created_at"])
        ended = datetime.fromisoformat(run["finished_at"])
        spans.append((trial["number"], (ended - begun).total_seconds(), ended))
    best = sweep["best_trial"]
    best_end = next(end for number, _, end in spans if number == best)
    return {
        "device_s": round(sum(s for _, s, _ in spans), 1),
        "device_s_to_best": round(sum(s for _, s, end in spans if end <= best_end), 1),
        "wall_s": round(wall, 1),
        "trials_stopped": sum(1 for t in sweep["trials"] if t["stopped_reason"]),
        "best_trial": best,
        "best_point": sweep["trials"][best]["point"],
        "best_loss": sweep["trials"][best]["value"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--steps", type=int, default=270)
    parser.add_argument("--quick", action="store_true", help="4 trials; results not written")
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/sweep_asha_<steps>.json"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    samples: dict[str, list[dict[str, Any]]] = {"asha": [], "grid": []}
    with tempfile.TemporaryDirectory(prefix="crucible-sweep-bench-") as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        process = start_up(home, port, Path(tmp) / "up.log")
        try:
            token = (home / "token").read_text().strip()
            with CrucibleClient(f"http://127.0.0.1:{port}", token) as api:
                make_teacher_data(api)
                for sample in range(args.samples):
                    # Alternated, ASHA first in even samples, so drift favours neither.
                    order = ("asha", "grid") if sample % 2 == 0 else ("grid", "asha")
                    for kind in order:
                        manifest = sweep_manifest(
                            f"{kind}-{sample}", args.steps, asha=kind == "asha", quick=args.quick
                        )
                        result = run_sweep(api, manifest)
                        samples[kind].append(result)
                        print(kind, sample, result, flush=True)
        finally:
            process.terminate()
            process.wait(30)
    summary = {
        kind: {
            key: {
                "median": statistics.median(r[key] for r in results),
                "min": min(r[key] for r in results),
                "max": max(r[key] for r in results),
            }
            for key in ("device_s", "device_s_to_best", "wall_s")
        }
        for kind, results in samples.items()
    }
    ratio = summary["asha"]["device_s"]["median"] / summary["grid"]["device_s"]["median"]
    document = {
        "name": "sweep_asha",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cores": os.cpu_count(),
            "cpu": cpu_model(),
            "torch": torch.__version__,
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "config": {
            "trials": 4 if args.quick else 32,
            "steps": args.steps,
            "early_stopping": {"minSteps": args.steps // 27, "reductionFactor": 3},
            "concurrency": 1,
            "samples": args.samples,
            "how": "crucible up; the teacher of examples/train-and-eval.yaml; the grid of "
            "examples/sweep.yaml's run over lr x batch_size, with and without ASHA, "
            "alternated; device time = the trials' start-to-end, summed",
        },
        "results": {
            "summary": summary,
            "asha_device_share_of_grid": round(ratio, 3),
            "samples": samples,
        },
    }
    print(orjson.dumps(document["results"]["summary"], option=orjson.OPT_INDENT_2).decode())
    print(f"ASHA's device time is {ratio:.0%} of the grid's")
    if not args.quick:
        out = args.out or RESULTS / f"sweep_asha_{args.steps}.json"
        out.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
