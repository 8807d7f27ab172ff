"""Is an emulated run's gap to bf16 the format's, or its code path's? The Llama of the
numerics study (`research_bench.py --parts numerics`) trained eager at bf16, and through the
emulated formats' code path with the rounding taken out: every GEMM operand rounded to bf16
only, where MXFP8 or NVFP4 would round it to its format (EmulatedLinear, block_scaled_gemm,
float32 weight gradients, all else as an mxfp8 run has it).

    python3 numerics_control.py [--steps 300] [--arms bf16,emulated-path] --out "$OUT"

The study's data and schedule (16 rows of real text a step, each row seen once, AdamW at
3e-4, 2 warm-up steps, cosine decay), seed 0, through the Trainer directly rather than the
API, so a call spends its time on the runs: the bf16 arm should match the study's
`bf16-eager` run step for step, which checks the harness. If the emulated path alone ends
as far below bf16 as the formats did, the study's Llama gaps measure the path; if it ends
with bf16, the roundings themselves moved the loss. Results: numerics_control.json under
--out, rewritten after each arm, with each arm's losses and final loss (the mean of the
last 20 steps).
"""

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from common import out_dir, write_result
from train_job_bench import LLAMA_150M, LLAMA_TINY, text_records

from crucible.workloads.config import DataConfig, TrainConfig
from crucible.workloads.model_spec import HFModelSource, ModelSpec
from crucible.workloads.numerics.recipes import OperandQuantizer, QuantizedOperand
from crucible.workloads.numerics.telemetry import STATS
from crucible.workloads.train import Trainer

ARMS = {
    "bf16": {"precision": "bf16", "compile": False},
    # An mxfp8 run's fields, its rounding replaced by bf16's (without_rounding below).
    "emulated-path": {"precision": "mxfp8", "emulate_precision": True, "compile": True},
}
MODELS = {"llama-150M": LLAMA_150M, "llama-tiny": LLAMA_TINY}
"""The study's Llama, and a tiny one that checks the script on a CPU in seconds."""
FINAL = 20


def without_rounding(
    self: OperandQuantizer, operand: str, t: torch.Tensor, counter: torch.Tensor
) -> QuantizedOperand:
    """The operand as a bf16 GEMM reads it, in the emulated layer's place of the format's
    rounding: values exact in bf16, no tensor scale, no statistics."""
    return QuantizedOperand(t.bfloat16().float(), None, torch.zeros(len(STATS), device=t.device))


def train(arm: str, args: argparse.Namespace, records: list[dict[str, str]]) -> list[float]:
    config = TrainConfig(
        steps=args.steps, batch_size=16, warmup_steps=2, lr=3e-4, seed=0, **ARMS[arm]
    )
    model = ModelSpec(hf=HFModelSource(architecture="llama", config=MODELS[args.model]))
    trainer = Trainer(config, model, records, data=DataConfig(shape="text", packing=False))
    trainer.log = lambda step, metrics: None
    return trainer.train()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--model", choices=MODELS, default="llama-150M")
    parser.add_argument("--out", type=Path, default=out_dir())
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; known: {', '.join(ARMS)}")
    if args.steps < FINAL:
        parser.error(f"--steps {args.steps}: the final loss is the mean of the last {FINAL}")
    # The study's dataset: a document is 16 rows, one more document than steps.
    records = text_records(num_docs=args.steps + 1, rows_per_doc=16)
    OperandQuantizer._round = without_rounding  # type: ignore[method-assign]
    results: dict[str, Any] = {"model": args.model, "steps": args.steps, "seed": 0, "arms": {}}
    for arm in arms:
        start = time.monotonic()
        losses = train(arm, args, records)
        results["arms"][arm] = {
            "seconds": round(time.monotonic() - start),
            "final_loss": sum(losses[-FINAL:]) / FINAL,
            "losses": losses,
        }
        print(arm, {k: v for k, v in results["arms"][arm].items() if k != "losses"}, flush=True)
        write_result(args.out / "numerics_control.json", {"numerics_control": results})


if __name__ == "__main__":
    main()
