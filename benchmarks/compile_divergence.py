"""Does a compiled Llama train as the eager one does? The spread that compile adds to a
training run, against the spread of the eager run itself: where docs/numerics.md's caveat on
the Llama arm comes from.

    .venv/bin/python -m benchmarks.compile_divergence [--steps 150] [--moves 0,1e-6,-1e-6,3e-6]

A 4-layer Llama-architecture Hugging Face model (width 256) on the CPU in float32, 150 steps
of 16 rows of 128 byte tokens of real text (the installed torch's sources), AdamW at 3e-3,
seed 0: eager and compiled (`train.compile`), each with its learning rate moved by 0, +1e-6,
-1e-6 and +3e-6 of itself, alternated. A learning rate moved by a millionth is a
perturbation of the size of float32 rounding, so the eager runs' spread is what rounding
alone does to this training; compile reorders float32 sums the same way. Records each
run's 20-step mean loss every 30 steps, against the unmoved eager run's, in
benchmarks/results/compile_divergence.json. About 12 minutes on two cores.
"""

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# benchmarks/gpu runs standalone on the GPU machine, outside the package.
sys.path.insert(0, str(Path(__file__).parent / "gpu"))

from benchmarks.demo_loop import torch_cpu_machine
from train_job_bench import text_records

from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.config.workload import TrainConfig
from crucible.training.train import Trainer

LLAMA = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 264,
    "max_position_embeddings": 128,
}
STEPS = 150
LR = 3e-3
MOVES = (0.0, 1e-6, -1e-6, 3e-6)
RESULTS = Path(__file__).parent / "results" / "compile_divergence.json"


def losses(compiled: bool, move: float, steps: int, records: list[dict[str, str]]) -> list[float]:
    return small_llama_losses(records, steps=steps, lr=LR * (1 + move), seed=0, compile=compiled)


def small_llama_losses(records: list[dict[str, str]], **train_fields: Any) -> list[float]:
    """Each step's loss of the small Llama trained on `records`, 16 rows a step with 2
    warm-up steps, the rest of its TrainConfig as given (numerics_seeds.py's runs too)."""
    config = TrainConfig(batch_size=16, warmup_steps=2, **train_fields)
    trainer = Trainer(
        config, ModelSpec(hf=HFModelSource(architecture="llama", config=LLAMA)), records
    )
    trainer.log = lambda step, metrics: None
    return trainer.train()


def means(run: list[float]) -> dict[int, float]:
    return {end: sum(run[end - 20 : end]) / 20 for end in range(30, len(run) + 1, 30)}


def moves(given: str) -> tuple[float, ...]:
    try:
        return tuple(float(move) for move in given.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{given!r} is not a list of numbers, e.g. 0,1e-6"
        ) from None


def document(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "compile_divergence",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": torch_cpu_machine(),
        "config": {"model": LLAMA, "steps": args.steps, "lr": LR, "lr_moves": args.moves},
        "results": {"runs": runs},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--moves", type=moves, default=MOVES, help="fractions of the rate")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.steps < 30:
        parser.error(f"--steps {args.steps}: the losses are compared over 20-step means every 30")
    records = text_records(num_docs=400, rows_per_doc=1)
    runs: list[dict[str, Any]] = []
    for move in args.moves:
        for compiled in (False, True):
            start = time.monotonic()
            run = losses(compiled, move, args.steps, records)
            runs.append(
                {
                    "compiled": compiled,
                    "lr_moved_by": move,
                    "seconds": round(time.monotonic() - start),
                    "first_step_off": None,
                    "mean_loss": means(run),
                    "losses": run,
                }
            )
            print({k: v for k, v in runs[-1].items() if k != "losses"}, flush=True)
    reference = runs[0]["losses"]
    for run in runs:
        run["first_step_off"] = next(
            (
                i + 1
                for i, (a, b) in enumerate(zip(reference, run["losses"], strict=True))
                if abs(a - b) > 1e-5
            ),
            None,
        )
        run["vs_eager"] = {
            end: round(mean / runs[0]["mean_loss"][end] - 1, 5)
            for end, mean in run["mean_loss"].items()
        }
    args.out.write_text(json.dumps(document(args, runs), indent=1) + "\n")
    for run in runs:
        print(run["compiled"], run["lr_moved_by"], run["first_step_off"], run["vs_eager"])


if __name__ == "__main__":
    main()
