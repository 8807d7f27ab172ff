"""Issue 27's tooling on a GPU, through `crucible up` as a user runs it: the local mode's
executor starts every run's job on the GPU, and every figure is read back from the API.

    cd benchmarks/gpu && python3 research_bench.py --parts profile,sweep --out "$OUT"

Parts:
- `profile`: the built-in GPT 124M, bf16, compiled, micro-batch 16 of 1,024 positions of
  real text (the installed torch's sources), `--steps` steps a run; runs that profile steps
  61-63 (`profile_from_step`) alternate with runs that profile none, `--repeats` each. A
  step's time is what the job logs (tokens / tokens_per_s). The profiler's overhead is the
  profiled steps' median against the same steps of the unprofiled runs; its cost to the
  other steps is their median against the unprofiled runs' same steps. The runs also log
  their GPU telemetry (NVML, every CRUCIBLE_SYSTEM_METRICS_INTERVAL seconds) and MFU.
- `sweep`: the 32-trial grid of `benchmarks/sweep_asha.py` on the GPU (each trial asks for
  one), with ASHA and without (`--sweeps`), alternated, `--sweep-samples` times each.
- `numerics` (issue 28): for each of `--numerics-models` (`NUMERICS_MODELS`: the built-in
  GPT at `--preset` and a Llama-architecture Hugging Face model), `--numerics-steps` steps on
  the same data and seed at each of `--precisions` (`NUMERICS`), logging its numerics every
  20 steps: the final loss (mean of the last 20 steps), tokens/s (median after step 20) and
  the worst GEMM error against bf16, each read back from the API.

The home (SQLite, run outputs and profiles; checkpoints and datasets left out) is packed to
`home.tar.gz` under --out, at the fixed path it had here, so the dashboard can show these
runs elsewhere (`tar -xzf home.tar.gz -C /` then `CRUCIBLE_HOME=... crucible up`). Results:
`research.json`, rewritten after every run, so a call stopped at its limit keeps what ended.
"""

import argparse
import os
import signal
import statistics
import sys
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from common import REPO, environment
from train_job_bench import (
    EXPERIMENT,
    LLAMA_150M,
    PROJECT,
    free_port,
    process_environment,
    register,
    text_records,
)

sys.path.insert(0, str(REPO))

from benchmarks.demo_loop import start_up
from benchmarks.sweep_asha import make_teacher_data, run_sweep, sweep_manifest

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from crucible.training.records import write_jsonl

HOME = Path("/tmp/crucible-h200/home")
PROFILED = (61, 3)
"""The first profiled step and how many."""


NUMERICS: dict[str, dict[str, Any]] = {
    "bf16": {"precision": "bf16"},
    "fp8-tensor": {"precision": "fp8"},
    "fp8-row": {"precision": "fp8", "fp8_scaling": "row"},
    "fp8-block": {"precision": "fp8", "fp8_scaling": "block"},
    "mxfp8": {"precision": "mxfp8", "emulate_precision": True},
    "nvfp4": {"precision": "nvfp4", "emulate_precision": True},
    # The model eager, as mxfp8's and nvfp4's runs have it (precision.compiles_whole_model):
    # bf16 compiled whole is not their like, and this run tells the two apart.
    "bf16-eager": {"precision": "bf16", "compile": False},
}
"""`--precisions`' names and the train fields each sets."""

NUMERICS_MODELS: dict[str, dict[str, Any] | None] = {
    "gpt": None,
    "llama-150M": {"hf": {"architecture": "llama", "config": LLAMA_150M}},
}
"""`--numerics-models`' names and the `model` section each runs (None: the GPT at
`--preset`). Every Linear width of both is a multiple of 128, as block scaling needs."""


def gpt_run(
    name: str,
    args: argparse.Namespace,
    *,
    profile: bool,
    steps: int | None = None,
    dataset: str = "gpu-text",
    model: dict[str, Any] | None = None,
    **train_fields: Any,
) -> dict[str, Any]:
    """A TrainingRun of the GPT at `--preset`, or of `model` where given."""
    gpu = args.gpus > 0
    train: dict[str, Any] = {
        "steps": steps or args.steps,
        "batch_size": 16,
        "warmup_steps": 2,
        "lr": 3e-4,
        "precision": "bf16",
        "compile": gpu,
    }
    if profile:
        train |= {"profile_from_step": PROFILED[0], "profile_steps": PROFILED[1]}
    train |= train_fields
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "experiment": EXPERIMENT,
            "gpusPerNode": args.gpus,
            "config": {
                "model": model or {"preset": args.preset},
                "train": train,
                "data": {"shape": "text", "packing": False},
            },
            "inputs": [{"dataset": f"{dataset}@latest"}],
            "checkpoints": {"everySteps": steps or args.steps},
        },
    }


class RunDidNotSucceed(RuntimeError):
    """A run that failed, or had not ended by its time limit."""


def wait_for(api: CrucibleClient, run_id: int, limit_s: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        run = api.request("GET", f"/api/v1/runs/{run_id}")
        if Phase(run["phase"]).is_terminal:
            if run["phase"] != "Succeeded":
                raise RunDidNotSucceed(f"run {run_id} ended {run['phase']}: {run['message']}")
            return run
        time.sleep(1)
    raise RunDidNotSucceed(f"run {run_id} did not end in {limit_s} s")


def failure(api: CrucibleClient, run_id: int, limit_s: float) -> str | None:
    """Why the run did not succeed within `limit_s`, or None when it did."""
    try:
        wait_for(api, run_id, limit_s=limit_s)
    except RunDidNotSucceed as failed:
        return str(failed)
    return None


def series(api: CrucibleClient, run_id: int, key: str) -> dict[int, float]:
    found = api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": key})
    for item in found.get("series", found if isinstance(found, list) else []):
        if item.get("key") == key:
            return dict(zip(item["steps"], item["values"], strict=True))
    return {}


def step_seconds(api: CrucibleClient, run_id: int) -> dict[int, float]:
    tokens = series(api, run_id, "tokens")
    rate = series(api, run_id, "tokens_per_s")
    return {s: tokens[s] / rate[s] for s in rate if s in tokens and rate[s] > 0}


def median_of(times: dict[int, float], steps: range) -> float:
    return statistics.median(times[s] for s in steps if s in times)


def median_or_none(values: list[float]) -> float | None:
    """None where the run logged none (a CPU has no MFU peak and no NVML)."""
    return statistics.median(values) if values else None


def profile_part(api: CrucibleClient, args: argparse.Namespace, result: dict[str, Any]) -> None:
    data = HOME.parent / "data" / "text.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(data, text_records(num_docs=64, rows_per_doc=16))
    register(api, "gpu-text", data, 64)
    first, count = PROFILED
    profiled_steps = range(first, first + count)
    # Steps after the compile and its first measurements, away from the profiled window.
    other_steps = range(21, first - 5)
    runs: dict[str, list[dict[str, Any]]] = {"profiled": [], "unprofiled": []}
    for repeat in range(args.repeats):
        order = ("profiled", "unprofiled") if repeat % 2 == 0 else ("unprofiled", "profiled")
        for kind in order:
            name = f"gpt-124m-{kind}-{repeat}-{uuid.uuid4().hex[:4]}"
            manifest = gpt_run(name, args, profile=kind == "profiled")
            submitted = api.request(
                "POST", "/api/v1/runs", json={"project": PROJECT, "manifest": manifest}
            )
            run = wait_for(api, submitted["id"])
            times = step_seconds(api, run["id"])
            mfu = series(api, run["id"], "mfu")
            gpu_util = series(api, run["id"], "system/gpu/utilization")
            runs[kind].append(
                {
                    "run_id": run["id"],
                    "name": name,
                    "profiled_steps_s": median_of(times, profiled_steps),
                    "other_steps_s": median_of(times, other_steps),
                    "mfu_median": median_or_none([v for s, v in mfu.items() if s > 20]),
                    "gpu_utilization_readings": len(gpu_util),
                    "gpu_utilization_median": median_or_none(list(gpu_util.values())),
                    "profiles": api.request("GET", f"/api/v1/runs/{run['id']}/profiles"),
                }
            )
            print(kind, repeat, {k: v for k, v in runs[kind][-1].items() if k != "profiles"})
            result["profile"] = summarize_profile(runs)
            write(args.out, result)


def summarize_profile(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def spread(kind: str, key: str) -> dict[str, float]:
        values = [r[key] for r in runs[kind]]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    summary: dict[str, Any] = {"runs": runs}
    if runs["profiled"] and runs["unprofiled"]:
        for key in ("profiled_steps_s", "other_steps_s"):
            profiled = spread("profiled", key)
            unprofiled = spread("unprofiled", key)
            summary[key] = {
                "profiled_runs": profiled,
                "unprofiled_runs": unprofiled,
                "overhead": round(profiled["median"] / unprofiled["median"] - 1, 4),
            }
    return summary


def sweep_part(api: CrucibleClient, args: argparse.Namespace, result: dict[str, Any]) -> None:
    make_teacher_data(api)
    samples: dict[str, list[dict[str, Any]]] = {"asha": [], "grid": []}
    for sample in range(args.sweep_samples):
        order = ("asha", "grid") if sample % 2 == 0 else ("grid", "asha")
        for kind in (k for k in order if k in args.sweeps.split(",")):
            manifest = sweep_manifest(
                f"gpu-{kind}-{sample}", args.sweep_steps, asha=kind == "asha", quick=args.quick
            )
            manifest["spec"]["run"]["gpusPerNode"] = args.gpus
            outcome = run_sweep(api, manifest)
            samples[kind].append(outcome)
            print(kind, sample, outcome, flush=True)
            result["sweep"] = {"steps": args.sweep_steps, "samples": samples}
            if samples["asha"] and samples["grid"]:
                asha = statistics.median(r["device_s"] for r in samples["asha"])
                grid = statistics.median(r["device_s"] for r in samples["grid"])
                result["sweep"]["asha_device_share_of_grid"] = round(asha / grid, 3)
            write(args.out, result)


def numerics_part(api: CrucibleClient, args: argparse.Namespace, result: dict[str, Any]) -> None:
    data = HOME.parent / "data" / "numerics-text.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    # A document is 16 rows and a step takes 16: each run sees each row about once.
    docs = args.numerics_steps + 1
    write_jsonl(data, text_records(num_docs=docs, rows_per_doc=16))
    register(api, "gpu-numerics-text", data, docs)
    models: dict[str, Any] = {}
    result["numerics"] = {
        "steps": args.numerics_steps,
        "seed": args.numerics_seed,
        "compiled": not args.numerics_eager,
        # Compiled, mxfp8 and nvfp4 compile their roundings, not the step
        # (precision.compiles_whole_model); results from before that change lack this key.
        "emulated_compile": "roundings",
        "models": models,
    }
    for model in args.numerics_models.split(","):
        runs: dict[str, Any] = {}
        models[model] = {"runs": runs}
        for name in args.precisions.split(","):
            runs[name] = numerics_run(api, args, model, name)
            print(model, name, {k: v for k, v in runs[name].items() if k != "loss"}, flush=True)
            bf16 = runs.get("bf16", {}).get("final_loss")
            for other in runs.values():
                if bf16 is not None and other["final_loss"] is not None:
                    other["final_loss_vs_bf16"] = round(other["final_loss"] / bf16 - 1, 5)
            write(args.out, result)


def numerics_run(
    api: CrucibleClient, args: argparse.Namespace, model: str, precision: str
) -> dict[str, Any]:
    manifest = gpt_run(
        f"{model.lower()}-{precision}-{uuid.uuid4().hex[:4]}",
        args,
        profile=False,
        steps=args.numerics_steps,
        dataset="gpu-numerics-text",
        model=NUMERICS_MODELS[model],
        fp8_stats_every=20,
        seed=args.numerics_seed,
        **(NUMERICS[precision] | ({"compile": False} if args.numerics_eager else {})),
    )
    submitted = api.request("POST", "/api/v1/runs", json={"project": PROJECT, "manifest": manifest})
    run_id = submitted["id"]
    # One precision that fails or runs past its limit is recorded as such, with the steps it
    # logged, and the study goes on to the next: a device call has no time to start over.
    error = failure(api, run_id, args.numerics_limit_s)
    if error is not None and max(series(api, run_id, "loss"), default=0) == args.numerics_steps:
        # Past its last step, saving its checkpoint (one run of the study was cancelled
        # there): its end is worth a little more of the call.
        error = failure(api, run_id, 60)
    if (
        error is not None
        and not Phase(api.request("GET", f"/api/v1/runs/{run_id}")["phase"]).is_terminal
    ):
        api.request("POST", f"/api/v1/runs/{run_id}/cancel")
    losses = series(api, run_id, "loss")
    rate = series(api, run_id, "tokens_per_s")
    errors = series(api, run_id, "precision/matmul_rel_error_max")
    steps_logged = max(losses, default=0)
    last = sorted(losses)[-20:]
    return {
        "run_id": run_id,
        "error": error,
        "steps_logged": steps_logged,
        "loss": {str(step): v for step, v in sorted(losses.items())},
        # A run whose wait ran out after its last step (saving its checkpoint) is complete.
        "final_loss": (
            statistics.fmean(losses[s] for s in last)
            if steps_logged == args.numerics_steps
            else None
        ),
        "tokens_per_s": median_or_none([v for s, v in rate.items() if s > 20]),
        "matmul_rel_error_max": {str(step): v for step, v in errors.items()},
    }


def write(out: Path, result: dict[str, Any]) -> None:
    (out / "research.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


def pack_home(out: Path) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        left_out = {"checkpoints", "data", "packages"}
        return None if left_out.intersection(parts) else info

    with tarfile.open(out / "home.tar.gz", "w:gz") as packed:
        packed.add(HOME.parent, arcname=str(HOME.parent).lstrip("/"), filter=keep)


def check_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an unknown precision or model before the server starts, not at its run."""
    for flag, given, known in (
        ("--precisions", args.precisions, NUMERICS),
        ("--numerics-models", args.numerics_models, NUMERICS_MODELS),
    ):
        unknown = [name for name in given.split(",") if name not in known]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; known: {', '.join(known)}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--parts", default="profile,sweep")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep-steps", type=int, default=600)
    parser.add_argument("--sweep-samples", type=int, default=1)
    parser.add_argument("--sweeps", default="asha,grid", help="which of the two sweeps to run")
    parser.add_argument("--quick", action="store_true", help="4-trial sweeps")
    parser.add_argument("--preset", default="124M", help="the GPT of the profile part")
    parser.add_argument("--gpus", type=int, default=1, help="0: a CPU smoke run (fp32)")
    parser.add_argument("--numerics-steps", type=int, default=200)
    parser.add_argument("--numerics-limit-s", type=float, default=600)
    parser.add_argument("--precisions", default="bf16,fp8-block,mxfp8")
    parser.add_argument("--numerics-models", default="gpt", help=", ".join(NUMERICS_MODELS))
    parser.add_argument("--numerics-eager", action="store_true", help="runs without compile")
    parser.add_argument(
        "--numerics-seed",
        type=int,
        default=0,
        help="the runs' train.seed (initialisation, data order): another is a repeat to read "
        "the gaps' spread against",
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args(argv)
    check_names(parser, args)
    return args


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # A call stopped at its time limit (SIGTERM) still stops the server and packs the home.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parts = args.parts.split(",")
    result: dict[str, Any] = {"environment": environment(), "parts": parts}
    port = free_port()
    HOME.parent.mkdir(parents=True, exist_ok=True)
    os.environ.update(process_environment(HOME.parent))
    # Telemetry every second, so that short runs still have a line of readings to plot.
    process = start_up(
        HOME, port, args.out / "up.log", settings={"CRUCIBLE_SYSTEM_METRICS_INTERVAL": "1"}
    )
    try:
        token = (HOME / "token").read_text().strip()
        with CrucibleClient(f"http://127.0.0.1:{port}", token) as api:
            if "profile" in parts:
                profile_part(api, args, result)
            if "sweep" in parts:
                sweep_part(api, args, result)
            if "numerics" in parts:
                numerics_part(api, args, result)
    finally:
        process.terminate()
        process.wait(60)
        pack_home(args.out)


if __name__ == "__main__":
    main()
