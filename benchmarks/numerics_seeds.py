"""Do the emulated formats cost a small Llama anything, measured like for like? Each format
against float32 on the same code path (the model eager, as an emulated run's is), seed for
seed, with the spread that the seed alone gives: the control the GPU study's Llama arm
lacks (docs/numerics.md).

    .venv/bin/python -m benchmarks.numerics_seeds [--steps 150] [--seeds 0,1,2]
        [--precisions fp32,mxfp8,nvfp4]

compile_divergence.py's 4-layer Llama-architecture Hugging Face model (width 256) on the CPU,
150 steps of 16 rows of 128 byte tokens of real text, AdamW at 3e-3, without compile: for
each seed (the initialisation and the data order), one run a precision, the precisions
alternated within the seed. "fp32" is the CPU's plain run; "mxfp8" and "nvfp4" round every
GEMM operand of every Linear but the output head through the format (`emulate_precision`),
the rest of the step the same float32. Records each run's losses and final loss (the mean
of the last 20 steps) and each format's gap to the same seed's fp32 run in
benchmarks/results/numerics_seeds.json. About 40 minutes on two cores with the defaults
(nvfp4's roundings are most of it).
"""

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# benchmarks/gpu runs standalone on the GPU machine, outside the package.
sys.path.insert(0, str(Path(__file__).parent / "gpu"))

from benchmarks.compile_divergence import LLAMA, LR, small_llama_losses
from benchmarks.demo_loop import torch_cpu_machine
from train_job_bench import text_records

STEPS = 150
SEEDS = (0, 1, 2)
PRECISIONS = {
    "fp32": {},
    "mxfp8": {"precision": "mxfp8", "emulate_precision": True},
    "nvfp4": {"precision": "nvfp4", "emulate_precision": True},
}
"""The names --precisions takes and the train fields each sets (fp32: the CPU's bf16 run,
which autocasts only on a GPU)."""
FINAL = 20
"""Final loss: the mean of this many last steps, as the GPU study's (`--final` for a short
check of the script itself)."""
RESULTS = Path(__file__).parent / "results" / "numerics_seeds.json"


def losses(precision: str, seed: int, steps: int, records: list[dict[str, str]]) -> list[float]:
    return small_llama_losses(
        records, steps=steps, lr=LR, seed=seed, compile=False, **PRECISIONS[precision]
    )


def final(run: list[float], last: int) -> float:
    return sum(run[-last:]) / last


def summary(runs: list[dict[str, Any]], precisions: list[str]) -> dict[str, Any]:
    """Each format's gaps to the same seed's fp32 run, and fp32's own spread over seeds."""
    base = {r["seed"]: r["final_loss"] for r in runs if r["precision"] == "fp32"}
    found: dict[str, Any] = {}
    for precision in precisions:
        finals = [r["final_loss"] for r in runs if r["precision"] == precision]
        if not finals:
            continue
        entry: dict[str, Any] = {"final_loss": spread(finals)}
        gaps = [
            r["final_loss"] / base[r["seed"]] - 1
            for r in runs
            if r["precision"] == precision and r["seed"] in base
        ]
        if precision != "fp32" and gaps:
            entry["vs_fp32"] = spread(gaps)
        found[precision] = entry
    return found


def spread(values: list[float]) -> dict[str, Any]:
    return {
        "values": [round(v, 5) for v in values],
        "median": round(statistics.median(values), 5),
        "min": round(min(values), 5),
        "max": round(max(values), 5),
    }


def names(given: str) -> list[str]:
    chosen = given.split(",")
    unknown = [name for name in chosen if name not in PRECISIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown precision {', '.join(map(repr, unknown))}; known: {', '.join(PRECISIONS)}"
        )
    return chosen


def seeds(given: str) -> list[int]:
    try:
        return [int(seed) for seed in given.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{given!r} is not a list of integers, e.g. 0,1,2"
        ) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seeds", type=seeds, default=list(SEEDS))
    parser.add_argument("--precisions", type=names, default=list(PRECISIONS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--final", type=int, default=FINAL, help="steps the final loss averages")
    args = parser.parse_args()
    if not 1 <= args.final <= args.steps:
        parser.error(
            f"--steps {args.steps}: the final loss is the mean of the last {args.final} "
            "(--final), which must be at least 1 and at most --steps"
        )
    records = text_records(num_docs=400, rows_per_doc=1)
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        # Alternated: seed 0 runs the precisions in the given order, seed 1 in the reverse.
        order = args.precisions if seed % 2 == 0 else args.precisions[::-1]
        for precision in order:
            start = time.monotonic()
            run = losses(precision, seed, args.steps, records)
            runs.append(
                {
                    "precision": precision,
                    "seed": seed,
                    "seconds": round(time.monotonic() - start),
                    "final_loss": round(final(run, args.final), 5),
                    "losses": run,
                }
            )
            print({k: v for k, v in runs[-1].items() if k != "losses"}, flush=True)
            document = {
                "name": "numerics_seeds",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": torch_cpu_machine(),
                "config": {
                    "model": LLAMA,
                    "steps": args.steps,
                    "final": args.final,
                    "lr": LR,
                    "seeds": args.seeds,
                },
                "results": {"summary": summary(runs, args.precisions), "runs": runs},
            }
            # Rewritten after every run, so a stopped study keeps what ended.
            args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(summary(runs, args.precisions), indent=1))


if __name__ == "__main__":
    main()
