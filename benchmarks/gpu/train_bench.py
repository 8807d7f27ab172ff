"""Training throughput (tokens/s, MFU) and loss curves of the reference GPT on GPUs.

    python benchmarks/gpu/train_bench.py throughput --runs 124M:bf16:32 1.3B:fp8:16
    python benchmarks/gpu/train_bench.py alternate --groups 1.3B:bf16:32,1.3B:fp8:32
    python benchmarks/gpu/train_bench.py curve --preset 1.3B --precision fp8 --steps 2000
    torchrun --nproc_per_node 2 benchmarks/gpu/train_bench.py throughput --runs 1.3B:bf16:16

`throughput` times each run once, one after another; `alternate` builds a group's runs side
by side on one GPU and times them in turns, several windows each (medians and spread,
ratios against the group's first run). A run spec is PRESET:PRECISION:MICRO_BATCH[:OPTION...],
options `ac` (activation checkpointing), `ddp` (under torchrun: DistributedDataParallel of
the whole compiled model instead of FSDP2) and `autotune` (torch.compile mode
max-autotune-no-cudagraphs). Sequences are
`max_seq_len` (1,024) bytes of real text (`common.byte_corpus`), the same for every run.
Under torchrun every rank trains its own micro-batch and the model is sharded with FSDP2, so
tokens/s is the sum over ranks. The step is the trainer's: the model built by `build_model`,
`convert_to_float8` for fp8, fused AdamW from `build_optimizer`, clipping, the LR schedule,
bf16 autocast, torch.compile of forward and loss (per block under FSDP).
"""

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common import PEAK_BF16_FLOPS, byte_corpus, out_dir, write_result
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from crucible.config.workload import TrainConfig, model_preset
from crucible.models.gpt import build_model, flops_per_token, num_params
from crucible.training.parallelize import (
    apply_activation_checkpointing,
    apply_fsdp,
    compile_blocks,
)
from crucible.training.precision.fp8 import convert_to_float8, float8_stats
from crucible.training.train import build_lr_scheduler, build_optimizer


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


class Trainer:
    """One run spec's model, optimizer, data and step, built as the trainer builds them."""

    def __init__(self, spec: RunSpec, *, total_steps: int, lr: float, corpus: Tensor) -> None:
        self.spec = spec
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        device = (
            torch.device("cuda", self.rank % torch.cuda.device_count())
            if torch.cuda.is_available()
            else torch.device("cpu")  # a smoke test of the script with a tiny preset
        )
        self.device = device
        self.config = TrainConfig(
            steps=total_steps, lr=lr, warmup_steps=min(100, total_steps // 10), seed=0
        )
        self.model = build(spec, self.config, device)
        self.model_config = model_preset(spec.preset)
        self.optimizer = build_optimizer(self.config, self.model, device)  # type: ignore[arg-type]
        self.sharded = dist.is_initialized() and not spec.ddp
        forward = (
            DistributedDataParallel(
                self.model, device_ids=[device.index], gradient_as_bucket_view=True
            )
            if dist.is_initialized() and spec.ddp
            else self.model
        )
        self.scheduler = build_lr_scheduler(self.config, self.optimizer)
        self.seq = self.model_config.max_seq_len
        self.batches = Batches(corpus, spec.micro_batch, self.seq, device)

        def loss_of(inputs: Tensor, targets: Tensor) -> Tensor:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = forward(inputs)
            return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

        # One graph for forward and loss on one GPU and under DDP (the float32 logits never
        # reach memory unfused; dynamo splits the graph at DDP's buckets); under FSDP the
        # blocks are compiled on their own instead.
        self.compile_mode = "max-autotune-no-cudagraphs" if spec.autotune else None
        self.loss_fn = loss_of if self.sharded else torch.compile(loss_of, mode=self.compile_mode)

    def step(self) -> Tensor:
        inputs, targets = self.batches.take(self.rank, self.world)
        loss = self.loss_fn(inputs, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return loss.detach()

    def run(self, steps: int) -> tuple[float, list[Tensor]]:
        """Seconds for `steps` steps, their device work included, and their losses."""
        started = time.perf_counter()
        losses = [self.step() for _ in range(steps)]
        synchronize(self.device)
        return time.perf_counter() - started, losses

    def tokens_per_s(self, steps: int, seconds: float) -> float:
        return steps * self.spec.micro_batch * self.seq * self.world / seconds

    def mfu(self, tokens_per_s: float) -> float:
        flops = tokens_per_s * flops_per_token(self.model_config, self.seq)
        return flops / (PEAK_BF16_FLOPS * self.world)

    def describe(self) -> dict[str, Any]:
        """The run's settings, for its results record."""
        spec = self.spec
        return {
            "run": spec.name,
            "preset": spec.preset,
            "precision": spec.precision,
            "micro_batch": spec.micro_batch,
            "activation_checkpointing": spec.activation_checkpointing,
            "gpus": self.world,
            "fsdp": self.sharded,
            "ddp": dist.is_initialized() and spec.ddp,
            "compile_mode": self.compile_mode,
            "seq_len": self.seq,
            "params": num_params(build_model(self.model_config, device="meta")),
        }


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
    trainer = Trainer(spec, total_steps=steps + warmup, lr=lr, corpus=corpus)
    device = trainer.device
    warmup_s, losses = trainer.run(warmup)
    stats: dict[int, dict[str, float]] = {}
    started = time.perf_counter()
    for i in range(steps):
        losses.append(trainer.step())
        if fp8_stats_every and (i + 1) % fp8_stats_every == 0:
            stats[warmup + i + 1] = float8_stats(trainer.model)
    synchronize(device)
    elapsed = time.perf_counter() - started
    if profile and trainer.rank == 0:
        write_profile(spec, trainer.step, device)
    tokens_per_s = trainer.tokens_per_s(steps, elapsed)
    loss_values = torch.stack(losses).float()
    if dist.is_initialized():
        dist.all_reduce(loss_values, op=dist.ReduceOp.AVG)
    result: dict[str, Any] = {
        **trainer.describe(),
        "timed_steps": steps,
        "warmup_steps": warmup,
        "warmup_and_compile_s": round(warmup_s, 1),
        "tokens_per_s": round(tokens_per_s),
        "mfu": round(trainer.mfu(tokens_per_s), 4),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
        if device.type == "cuda"
        else None,
        "final_loss": round(loss_values[-1].item(), 4),
    }
    if record_losses:
        result["losses"] = [round(v, 5) for v in loss_values.tolist()]
    if stats:
        result["fp8_stats"] = stats
    del trainer
    release_compiled(device)
    return result


def alternate(
    group: list[RunSpec],
    *,
    samples: int,
    steps: int,
    warmup: int,
    settle: int,
    lr: float,
    corpus: Tensor,
    on_round: Callable[[dict[str, Any]], None] = lambda group: None,
) -> dict[str, Any]:
    """The runs of `group` built side by side on one GPU and timed in turns (A, B, A, B, ...),
    `samples` windows of `steps` steps each, so that every run sees the same machine state.
    Each window follows `settle` untimed steps, after the memory the other runs' activations
    held is given back: the caching allocator would otherwise hand it out mid-window.
    `on_round` gets the group's summary so far after every round, so that a run cut short
    keeps the samples it took."""
    # Each run compiles as it would alone: a second model through the same compiled loss
    # must not turn the first one's static shapes dynamic.
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        trainers = []
        warmup_s = []
        for spec in group:
            trainer = Trainer(
                spec, total_steps=warmup + samples * (settle + steps), lr=lr, corpus=corpus
            )
            empty_cache(trainer.device)
            warmup_s.append(trainer.run(warmup)[0])  # compiles
            trainers.append(trainer)
        per_run: list[list[float]] = [[] for _ in trainers]
        peaks = [0.0 for _ in trainers]
        for sample in range(samples):
            for index, trainer in enumerate(trainers):
                empty_cache(trainer.device)
                trainer.run(settle)
                seconds, _ = trainer.run(steps)
                per_run[index].append(trainer.tokens_per_s(steps, seconds))
                if trainer.device.type == "cuda":
                    peaks[index] = max(peaks[index], torch.cuda.max_memory_allocated() / 2**30)
                if trainer.rank == 0:  # progress, for a run cut short
                    print(
                        json.dumps(
                            {
                                "run": trainer.spec.name,
                                "sample": sample,
                                "tokens_per_s": round(per_run[index][-1]),
                            }
                        ),
                        flush=True,
                    )
            on_round(summarize(trainers, per_run, warmup_s, peaks, steps, warmup, settle))
    summary = summarize(trainers, per_run, warmup_s, peaks, steps, warmup, settle)
    device = trainers[0].device
    del trainers, trainer
    release_compiled(device)
    return summary


def summarize(
    trainers: list[Trainer],
    per_run: list[list[float]],
    warmup_s: list[float],
    peaks: list[float],
    steps: int,
    warmup: int,
    settle: int,
) -> dict[str, Any]:
    """A group's runs and their ratios to the first, from the samples taken so far."""
    runs = []
    for trainer, values, compile_s, peak in zip(trainers, per_run, warmup_s, peaks, strict=True):
        median = statistics.median(values)
        runs.append(
            {
                **trainer.describe(),
                "timed_steps_per_sample": steps,
                "warmup_steps": warmup,
                "settle_steps": settle,
                "warmup_and_compile_s": round(compile_s, 1),
                "samples_tokens_per_s": [round(v) for v in values],
                "tokens_per_s": {
                    "median": round(median),
                    "min": round(min(values)),
                    "max": round(max(values)),
                },
                "mfu_median": round(trainer.mfu(median), 4),
                # Every run's weights and optimizer state stay resident during the others'
                # turns, so this includes them.
                "peak_memory_gib_all_runs_resident": round(peak, 1) if peak else None,
            }
        )
    first = per_run[0]
    ratios = {}
    for run, values in zip(runs[1:], per_run[1:], strict=True):
        rounds = [b / a for a, b in zip(first, values, strict=True)]
        ratios[f"{run['run']} / {runs[0]['run']}"] = {
            "ratio_of_medians": round(statistics.median(values) / statistics.median(first), 3),
            "per_round_min": round(min(rounds), 3),
            "per_round_max": round(max(rounds), 3),
        }
    return {"runs": runs, "ratios": ratios}


def best_by_precision(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Each (preset, precision)'s highest median over the groups, and every precision's
    best against the first precision's best of the same preset."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for group in groups:
        for run in group["runs"]:
            key = (run["preset"], run["precision"])
            if (
                key not in best
                or run["tokens_per_s"]["median"] > best[key]["tokens_per_s"]["median"]
            ):
                best[key] = run
    bests = {
        f"{preset}:{precision}": {"run": run["run"], "tokens_per_s": run["tokens_per_s"]}
        for (preset, precision), run in best.items()
    }
    ratios = {}
    for (preset, _), run in best.items():
        base = next(r for (p, _), r in best.items() if p == preset)
        if run is not base:
            ratio = run["tokens_per_s"]["median"] / base["tokens_per_s"]["median"]
            ratios[f"{run['run']} / {base['run']}"] = round(ratio, 3)
    return {"best": bests, "best_over_best": ratios}


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


def empty_cache(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def release_compiled(device: torch.device) -> None:
    """Drop compiled graphs and cached memory, so that the next run starts as a fresh one."""
    torch._dynamo.reset()
    empty_cache(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["throughput", "alternate", "curve"])
    parser.add_argument("--runs", nargs="*", default=[], help="throughput: PRESET:PRECISION:MB")
    parser.add_argument(
        "--groups",
        nargs="*",
        default=[],
        help="alternate: run specs joined by commas, timed in turns, one group at a time",
    )
    parser.add_argument("--samples", type=int, default=3, help="alternate: windows per run")
    parser.add_argument(
        "--settle", type=int, default=2, help="alternate: untimed steps before each window"
    )
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
    elif args.mode == "alternate":
        corpus = byte_corpus(4 * 2**20 * 4)
        groups: list[dict[str, Any]] = []
        payload = {"mode": "alternate", "groups": groups}

        def write_with(partial: dict[str, Any]) -> None:
            # Written after every round, so that a run cut short keeps what it measured.
            if rank == 0:
                so_far = [*groups, partial]
                write_result(
                    out_dir() / args.out,
                    {"mode": "alternate", "groups": so_far, **best_by_precision(so_far)},
                )

        for text in args.groups:
            group = alternate(
                [RunSpec.parse(r) for r in text.split(",")],
                samples=args.samples,
                steps=args.steps,
                warmup=args.warmup,
                settle=args.settle,
                lr=args.lr,
                corpus=corpus,
                on_round=write_with,
            )
            groups.append(group)
            payload = {"mode": "alternate", "groups": groups, **best_by_precision(groups)}
            if rank == 0:
                print(json.dumps(group), flush=True)
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
