"""Is an emulated run's gap to bf16 the format's, or its code path's? The Llama of the
numerics study (`research_bench.py --parts numerics`) trained eager at bf16, and through the
emulated formats' code path with the rounding taken out: every GEMM operand rounded to bf16
only, where MXFP8 or NVFP4 would round it to its format (EmulatedLinear, block_scaled_gemm,
float32 weight gradients, all else as an mxfp8 run has it).

    python3 numerics_control.py [--steps 300] [--arms bf16,emulated-path,mxfp8] --out "$OUT"

The study's data and schedule (16 rows of real text a step, each row seen once, AdamW at
3e-4, 2 warm-up steps, cosine decay), seed 0, through the Trainer directly rather than the
API, so a call spends its time on the runs: the bf16 arm should match the study's
`bf16-eager` run to within a repeat's spread (a GPU backward is not bitwise reproducible),
which checks the harness. If the emulated path alone ends
as far below bf16 as the formats did, the study's Llama gaps measure the path; if it ends
with bf16, the roundings themselves moved the loss. The `mxfp8` arm keeps the roundings,
as the study's mxfp8 run has them.

Whether a lower training loss is a better model: after training, each arm's weights are
scored on held-out rows (the documents after the training ones), through the arm's own
forward and through a plain bf16 model given the same weights. Results:
numerics_control.json under --out, rewritten after each arm, with each arm's losses, final
loss (the mean of the last 20 steps) and held-out losses.
"""

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from common import out_dir, write_result
from train_job_bench import LLAMA_150M, LLAMA_TINY, text_records

from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.config.workload import DataConfig, TrainConfig
from crucible.training.data import collate_rows
from crucible.training.precision.recipes import OperandQuantizer, QuantizedOperand
from crucible.training.precision.telemetry import STATS
from crucible.training.train import Trainer, _rows
from crucible.training.train_data import build_train_data

ARMS = {
    "bf16": {"precision": "bf16", "compile": False},
    # An mxfp8 run's fields, its rounding replaced by bf16's (without_rounding below).
    "emulated-path": {"precision": "mxfp8", "emulate_precision": True, "compile": True},
    "mxfp8": {"precision": "mxfp8", "emulate_precision": True, "compile": True},
}
UNROUNDED = {"emulated-path"}
"""The arms whose roundings are replaced by bf16's (without_rounding)."""
MODELS = {"llama-150M": LLAMA_150M, "llama-tiny": LLAMA_TINY}
"""The study's Llama, and a tiny one that checks the script on a CPU in seconds."""
FINAL = 20
HELD_OUT_DOCS = 4
"""Documents of 16 rows after the training ones, scored by every arm's final weights."""
TEXT = DataConfig(shape="text", packing=False)


def without_rounding(
    self: OperandQuantizer, operand: str, t: torch.Tensor, counter: torch.Tensor
) -> QuantizedOperand:
    """The operand as a bf16 GEMM reads it, in the emulated layer's place of the format's
    rounding: values exact in bf16, no tensor scale, no statistics."""
    return QuantizedOperand(t.bfloat16().float(), None, torch.zeros(len(STATS), device=t.device))


def trained(
    arm: str, args: argparse.Namespace, records: list[dict[str, str]]
) -> tuple[Trainer, list[float]]:
    config = TrainConfig(
        steps=args.steps, batch_size=16, warmup_steps=2, lr=3e-4, seed=0, **ARMS[arm]
    )
    trainer = Trainer(config, llama(args), records, data=TEXT)
    trainer.log = lambda step, metrics: None
    return trainer, trainer.train()


def llama(args: argparse.Namespace) -> ModelSpec:
    return ModelSpec(hf=HFModelSource(architecture="llama", config=MODELS[args.model]))


def held_out_loss(trainer: Trainer, records: list[dict[str, str]]) -> float:
    """The mean loss of the trainer's model over `records`, 16 rows a batch, no update."""
    data = build_train_data(
        trainer.config, TEXT, trainer.tokenizer, records, trainer.raw_model.max_seq_len
    )
    losses = []
    trainer.model.eval()
    with torch.no_grad():
        for _ in range(len(records)):  # a document is 16 rows: a batch
            items = data.take(16)
            batch = collate_rows(_rows(items), pad_id=trainer.tokenizer.PAD).to(trainer.device)
            losses.append(trainer.forward_loss(batch).item())
    return sum(losses) / len(losses)


def as_bf16(trainer: Trainer, args: argparse.Namespace, records: list[dict[str, str]]) -> Trainer:
    """A plain bf16 model holding the trainer's weights (an emulated layer's state is
    nn.Linear's)."""
    config = TrainConfig(steps=1, batch_size=16, seed=0, precision="bf16", compile=False)
    state = trainer.full_model_state()
    return Trainer(config, llama(args), records, data=TEXT, init_model_state=state)


def unrounded(arm: str) -> contextlib.AbstractContextManager[Any]:
    if arm not in UNROUNDED:
        return contextlib.nullcontext()
    return mock.patch.object(OperandQuantizer, "_round", without_rounding)


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
    # The study's dataset: a document is 16 rows, one more document than steps; the
    # held-out documents follow them in the same text.
    documents = text_records(num_docs=args.steps + 1 + HELD_OUT_DOCS, rows_per_doc=16)
    records, held_out = documents[: args.steps + 1], documents[args.steps + 1 :]
    results: dict[str, Any] = {"model": args.model, "steps": args.steps, "seed": 0, "arms": {}}
    for arm in arms:
        start = time.monotonic()
        with unrounded(arm):
            trainer, losses = trained(arm, args, records)
            own_forward = held_out_loss(trainer, held_out)
        bf16_forward = held_out_loss(as_bf16(trainer, args, held_out), held_out)
        results["arms"][arm] = {
            "seconds": round(time.monotonic() - start),
            "final_loss": sum(losses[-FINAL:]) / FINAL,
            "held_out_loss": {"own_forward": own_forward, "bf16_forward": bf16_forward},
            "losses": losses,
        }
        del trainer
        print(arm, {k: v for k, v in results["arms"][arm].items() if k != "losses"}, flush=True)
        write_result(args.out / "numerics_control.json", {"numerics_control": results})


if __name__ == "__main__":
    main()
