"""How long the train job's async checkpoint (`config.train.checkpoint_async`) of the 1.3B
model (weights and AdamW state) blocks the training loop.

    python benchmarks/gpu/checkpoint_bench.py --preset 1.3B --saves 3

It runs what the train job runs: the reference `Trainer` with `checkpoint_async`, saving
through the run's checkpointer (`crucible.sdk.checkpoint.RunCheckpointer` on a
`CheckpointStore`: DCP `async_save` through one cached writer, then the registration); only
the registration is answered in memory instead of by the API. Every `--every` steps the
trainer saves. Blocked time = the save call (it returns once the state is copied to host
memory) plus how much slower the next step is than the median step without a save; the
write is waited for after that, outside the timing, so that one save's write is not counted
against the next. The first save also allocates the host buffers; the figure the target is
checked against is the median over the later ones.
"""

import argparse
import itertools
import json
import random
import shutil
import statistics
import string
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from common import out_dir, write_result

from crucible.artifacts import storage
from crucible.config.workload import TrainConfig, model_preset
from crucible.sdk.checkpoint import CheckpointStore, RunCheckpointer, checkpoint_name
from crucible.training.train import Trainer

TARGET_BLOCKED_S = 1.0


class InMemoryRegistry:
    """Stands in for the API client: the store asks it for the run's latest checkpoint (a
    fresh run has none) and registers each checkpoint it completes."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)

    def latest_checkpoint(self, run_id: int) -> None:
        return None

    def register_checkpoint(self, run_id: int, checkpoint_in: Any) -> SimpleNamespace:
        return SimpleNamespace(id=next(self.ids), run_id=run_id, **checkpoint_in.model_dump())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="1.3B")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--out", default="checkpoint.json")
    args = parser.parse_args()
    result = measure(args)
    print(json.dumps(result), flush=True)
    write_result(
        out_dir() / args.out,
        {
            "benchmark": "async_checkpoint",
            "config": {"preset": args.preset, "micro_batch": args.micro_batch, "saves": args.saves},
            **result,
            "target_blocked_s": TARGET_BLOCKED_S,
            "met": result["blocked_s"] < TARGET_BLOCKED_S,
        },
    )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model = model_preset(args.preset)
    # No save in the first `every` steps (warm-up), and a step after the last save.
    total_steps = args.every * (args.saves + 1) + 1
    config = TrainConfig(
        steps=total_steps,
        batch_size=args.micro_batch,
        lr=1e-4,
        warmup_steps=1,
        checkpoint_async=True,
    )
    directory = Path(args.dir or tempfile.mkdtemp(prefix="ckpt-bench-"))
    store = CheckpointStore(
        InMemoryRegistry(),  # type: ignore[arg-type]
        run_id=1,
        attempt=None,
        base_uri=storage.file_uri(directory),
    )
    checkpointer = RunCheckpointer(store, resume_from=None, async_save=True)
    trainer = Trainer(
        config, model, full_length_records(model.max_seq_len), checkpointer=checkpointer
    )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed_step() -> float:
        sync()
        started = time.perf_counter()
        trainer.step += 1
        trainer.train_step()
        sync()
        return time.perf_counter() - started

    step_times: list[float] = []
    saves: list[dict[str, Any]] = []
    while trainer.step < total_steps:
        step_s = timed_step()
        if trainer.step > 2:  # the first steps warm up the allocator and kernels
            step_times.append(step_s)
        if trainer.step % args.every or trainer.step == args.every:
            continue
        started = time.perf_counter()
        trainer.save_checkpoint()
        sync()
        save_call_s = time.perf_counter() - started
        next_step_s = timed_step()
        written_started = time.perf_counter()
        trainer.wait_for_checkpoint()
        written_after_s = time.perf_counter() - written_started
        # One checkpoint on disk at a time: a 1.3B one with AdamW state is 30 GiB.
        written = directory / checkpoint_name(trainer.step - 1)
        saves.append(
            {
                "step": trainer.step - 1,
                "save_call_s": round(save_call_s, 4),
                "next_step_s": round(next_step_s, 4),
                "written_after_s": round(written_after_s, 2),
                "checkpoint_gib": round(storage_size(written) / 2**30, 2),
            }
        )
        shutil.rmtree(written)
    baseline = statistics.median(step_times)
    for record in saves:
        record["blocked_s"] = round(
            record["save_call_s"] + max(record["next_step_s"] - baseline, 0.0), 4
        )
    steady = [r["blocked_s"] for r in saves[1:]] or [saves[0]["blocked_s"]]
    shutil.rmtree(directory, ignore_errors=True)
    return {
        "median_step_s": round(baseline, 4),
        "saves": saves,
        "blocked_s": statistics.median(steady),
    }


def storage_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def full_length_records(max_seq_len: int, count: int = 64) -> list[dict[str, str]]:
    """SFT records of random letters that fill the model's context (BOS and EOS included)."""
    rng = random.Random(0)
    half = (max_seq_len - 1) // 2
    return [
        {
            "prompt": "".join(rng.choices(string.ascii_letters, k=half)),
            "completion": "".join(rng.choices(string.ascii_letters, k=max_seq_len - 1 - half)),
        }
        for _ in range(count)
    ]


if __name__ == "__main__":
    main()
