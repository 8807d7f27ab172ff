"""Training throughput (tokens/s, MFU) and loss curves of the reference GPT on GPUs.

    python benchmarks/gpu/train_bench.py throughput --runs 124M:bf16:32 1.3B:fp8:16
    python benchmarks/gpu/train_bench.py curve --preset 1.3B --precision fp8 --steps 2000
    torchrun --nproc_per_node 2 benchmarks/gpu/train_bench.py throughput --runs 1.3B:bf16:16

A run spec is PRESET:PRECISION:MICRO_BATCH[:OPTION...], options `ac` (activation
checkpointing), `ddp` (under torchrun: DistributedDataParallel of the whole compiled model
instead of FSDP2) and `autotune` (torch.compile mode max-autotune-no-cudagraphs). Sequences are
`max_seq_len` (1,024) bytes of real text (`common.byte_corpus`), the same for every run.
Under torchrun every rank trains its own micro-batch and the model is sharded with FSDP2, so
tokens/s is the sum over ranks. The step is the trainer's: the model built by `build_model`,
`convert_to_float8` for fp8, fused AdamW from `build_optimizer`, clipping, the LR schedule,
bf16 autocast, torch.compile of forward and loss (per block under FSDP).
"""

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common import PEAK_BF16_FLOPS, byte_corpus, out_dir, write_result
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from crucible.workloads.config import TrainConfig, model_preset
from crucible.workloads.fp8 import convert_to_float8, float8_stats
from crucible.workloads.model import build_model, flops_per_token, num_params
from crucible.workloads.parallelize import (
    apply_activation_checkpointing,
    apply_fsdp,
    compile_blocks,
)
from crucible.workloads.train import build_lr_scheduler, build_optimizer


@dataclass(frozen=True)
class RunSpec:
    preset: str
    precision: str
    micro_batch: int
    activation_checkpointing: bool = False
    ddp: bool = False
    autotune: bool = False

    @classmethod
    def parse(cls, text: str) -> "RunSpec":
        preset, precision, micro_batch, *options = text.split(":")
        unknown = set(options) - {"ac", "ddp", "autotune"}
        if unknown:
            raise SystemExit(f"unknown run option(s) {sorted(unknown)} in {text!r}")
        return cls(
            preset,
            precision,
            int(micro_batch),
            activation_checkpointing="ac" in options,
            ddp="ddp" in options,
            autotune="autotune" in options,
        )

    @property
    def name(self) -> str:
        options = [
            flag
            for flag, on in (
                ("ac", self.activation_checkpointing),
                ("ddp", self.ddp),
                ("autotune", self.autotune),
            )
            if on
        ]
        return "-".join([self.preset, self.precision, f"mb{self.micro_batch}", *options])


class Batches:
    """Consecutive windows of the corpus; rank r of w takes every w-th micro-batch, so the
    global data order does not depend on the number of ranks."""

    def __init__(self, corpus: Tensor, micro_batch: int, seq_len: int, device: torch.device):
        self.corpus, self.micro_batch, self.seq_len, self.device = (
            corpus,
            micro_batch,
            seq_len,
            device,
        )
        self.windows = (corpus.numel() - 1) // seq_len
        self.next = 0

    def take(self, rank: int, world: int) -> tuple[Tensor, Tensor]:
        start = (self.next + rank * self.micro_batch) % (self.windows - self.micro_batch)
        self.next += world * self.micro_batch
        index = (torch.arange(self.micro_batch) + start)[:, None] * self.seq_len
        rows = self.corpus[index + torch.arange(self.seq_len + 1)]
        if self.device.type == "cuda":
            rows = rows.pin_memory()
        rows = rows.to(self.device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]


def build(spec: RunSpec, config: TrainConfig, device: torch.device) -> nn.Module:
    model_config = model_preset(spec.preset)
    torch.manual_seed(config.seed)
    model = build_model(model_config, device=device)
    if spec.precision == "fp8":
        convert_to_float8(model)
    apply_activation_checkpointing(model, spec.activation_checkpointing)
    if dist.is_initialized() and not spec.ddp:
        apply_fsdp(model, param_dtype=torch.bfloat16)
        compile_blocks(model)
    return model


def train(
    spec: RunSpec,
    *,
    steps: int,
    warmup: int,
    lr: float,
    corpus: Tensor,
    record_losses: bool,
    fp8_stats_every: int = 0,
    profile: bool = False,
) -> dict[str, Any]:
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    device = (
        torch.device("cuda", rank % torch.cuda.device_count())
        if torch.cuda.is_available()
        else torch.device("cpu")  # a smoke test of the script with a tiny preset
    )
    config = TrainConfig(
        steps=steps + warmup, lr=lr, warmup_steps=min(100, (steps + warmup) // 10), seed=0
    )
    model = build(spec, config, device)
    model_config = model_preset(spec.preset)
    optimizer = build_optimizer(config, model, device)  # type: ignore[arg-type]
    sharded = dist.is_initialized() and not spec.ddp
    forward = (
        DistributedDataParallel(model, device_ids=[device.index], gradient_as_bucket_view=True)
        if dist.is_initialized() and spec.ddp
        else model
    )
    scheduler = build_lr_scheduler(config, optimizer)
    seq = model_config.max_seq_len
    batches = Batches(corpus, spec.micro_batch, seq, device)

    def loss_of(inputs: Tensor, targets: Tensor) -> Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = forward(inputs)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    # One graph for forward and loss on one GPU and under DDP (the float32 logits never
    # reach memory unfused; dynamo splits the graph at DDP's buckets); under FSDP the blocks
    # are compiled on their own instead.
    mode = "max-autotune-no-cudagraphs" if spec.autotune else None
    loss_fn = loss_of if sharded else torch.compile(loss_of, mode=mode)

    def step() -> Tensor:
        inputs, targets = batches.take(rank, world)
        loss = loss_fn(inputs, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        return loss.detach()

    compile_started = time.perf_counter()
    losses: list[Tensor] = []
    for _ in range(warmup):
        losses.append(step())
    synchronize(device)
    warmup_s = time.perf_counter() - compile_started
    stats: dict[int, dict[str, float]] = {}
    started = time.perf_counter()
    for i in range(steps):
        losses.append(step())
        if fp8_stats_every and (i + 1) % fp8_stats_every == 0:
            stats[warmup + i + 1] = float8_stats(model)
    synchronize(device)
    elapsed = time.perf_counter() - started
    if profile and rank == 0:
        write_profile(spec, step, device)
    tokens = steps * spec.micro_batch * seq * world
    tokens_per_s = tokens / elapsed
    mfu = tokens_per_s * flops_per_token(model_config, seq) / (PEAK_BF16_FLOPS * world)
    loss_values = torch.stack(losses).float()
    if dist.is_initialized():
        dist.all_reduce(loss_values, op=dist.ReduceOp.AVG)
    result: dict[str, Any] = {
        "run": spec.name,
        "preset": spec.preset,
        "precision": spec.precision,
        "micro_batch": spec.micro_batch,
        "activation_checkpointing": spec.activation_checkpointing,
        "gpus": world,
        "fsdp": sharded,
        "ddp": dist.is_initialized() and spec.ddp,
        "compile_mode": mode,
        "seq_len": seq,
        "params": num_params(build_model(model_config, device="meta")),
        "timed_steps": steps,
        "warmup_steps": warmup,
        "warmup_and_compile_s": round(warmup_s, 1),
        "tokens_per_s": round(tokens_per_s),
        "mfu": round(mfu, 4),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
        if device.type == "cuda"
        else None,
        "final_loss": round(loss_values[-1].item(), 4),
    }
    if record_losses:
        result["losses"] = [round(v, 5) for v in loss_values.tolist()]
    if stats:
        result["fp8_stats"] = stats
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    return result


def write_profile(spec: RunSpec, step: Any, device: torch.device) -> None:
    """Kernel time per operator over 3 more steps (after the timed ones), to see where a
    step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        synchronize(device)
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
    (out_dir() / f"profile_{spec.name}.txt").write_text(table)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["throughput", "curve"])
    parser.add_argument("--runs", nargs="*", default=[], help="throughput: PRESET:PRECISION:MB")
    parser.add_argument("--preset", default="1.3B")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--out", default="train.json", help="file name under $OUT")
    parser.add_argument(
        "--profile", action="store_true", help="throughput: also write each run's kernel table"
    )
    args = parser.parse_args()

    torch.set_float32_matmul_precision("high")
    if "LOCAL_RANK" in os.environ:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank() if dist.is_initialized() else 0
    if args.mode == "throughput":
        specs = [RunSpec.parse(r) for r in args.runs]
        corpus = byte_corpus(4 * 2**20 * 4)
        results = []
        for spec in specs:
            try:
                result = train(
                    spec,
                    steps=args.steps,
                    warmup=args.warmup,
                    lr=args.lr,
                    corpus=corpus,
                    record_losses=False,
                    profile=args.profile,
                )
            except Exception as error:  # a failed run is a result too; keep measuring others
                result = {"run": spec.name, "error": f"{type(error).__name__}: {error}"[:2000]}
                torch._dynamo.reset()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            if rank == 0:
                print(json.dumps(result), flush=True)
            results.append(result)
        payload: dict[str, Any] = {"mode": "throughput", "runs": results}
    else:
        spec = RunSpec(args.preset, args.precision, args.micro_batch)
        tokens = (
            (args.steps + args.warmup + 1)
            * args.micro_batch
            * (model_preset(args.preset).max_seq_len + 1)
        )
        corpus = byte_corpus(tokens + 2**20)
        result = train(
            spec,
            steps=args.steps,
            warmup=args.warmup,
            lr=args.lr,
            corpus=corpus,
            record_losses=True,
            fp8_stats_every=200 if args.precision == "fp8" else 0,
        )
        if rank == 0:
            print(json.dumps({k: v for k, v in result.items() if k not in ("losses", "fp8_stats")}))
        payload = {"mode": "curve", "lr": args.lr, "runs": [result]}
    if rank == 0:
        write_result(out_dir() / args.out, payload)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
