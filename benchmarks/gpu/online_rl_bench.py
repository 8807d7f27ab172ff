"""Online RL on the GPU (issue 23): synchronous against `max_staleness` 1 and 2 on the same
task, and the weight update from trainer to generator.

    python benchmarks/gpu/online_rl_bench.py --out online_rl.json

"rounds": `OnlineRL` (the library the online TrainingRun drives) on `letter_or_digit` with
digits only, every reply `--reply-tokens` long (the reward reads its first character; the
rest makes generation cost what a real reply costs), the 124M GPT from fresh weights in
float32 (the learner has no bf16 autocast yet), `--episodes` episodes a round in groups of
16, trained in micro-batches of `--micro-batch` rows. Each `max_staleness` runs `--rounds`
rounds from the same weights and seed; reported: the first round whose mean reward reaches
`--target` and the wall time to the end of it, episodes sampled per second, the
trainer's idle share (time waiting for samples over wall time) and the GPU's own
(`gpu_idle_share`: one minus NVML's utilization, read every 0.1 s by the SDK's telemetry
reader, `sdk/gpu_telemetry.py`, averaged over the run). The three are run one after
another in one process, `--samples` times in alternating order. With `--stop-at-target`
a run ends at the round that reaches the target (the figures after it are not read).

With `--generators thread process` each configuration runs with the generator in the
trainer's process and in a process of its own (`generator: process`), alternated; with
`--processes 1 2` the process generator runs as one process and as two sharing each batch
(`generators: 2`), alternated.

"weights": the in-process weight update (`Generator.load_weights`, a device-to-device copy
of every parameter and buffer into the generator's copy), the snapshot a busy generator
loads later (`weights_snapshot`), and the update of a generator in a process of its own
(`RemoteGenerator.load_weights`: a safetensors file written under /tmp, read by the other
process onto the device), for the 124M and 1.3B shapes in bf16 and float32, median of 5
after 2 warm-ups.

`--device cpu --preset tiny --episodes 64 --rounds 3 --reply-tokens 4 --parts rounds` only
tries the script. On the device machine, carry `.whl` (`wheels.sh`) and install it first,
as `serve_bench.py` says: the environments' loader checks its options with pydantic.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import out_dir, synchronize, write_result

from crucible.agents.loading import load_environment
from crucible.agents.policy import PolicyVersion
from crucible.agents.sandbox import Sandbox
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig, OnlineRLConfig
from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.generator import Generator, weights_snapshot
from crucible.online_rl.loop import OnlineRL
from crucible.online_rl.remote_generator import RemoteGenerator
from crucible.sdk.gpu_telemetry import GpuReading, GpuSampler, NvmlGpus, busy_share

STALENESS = (0, 1, 2)
GROUP = 16


def rounds_run(
    args: argparse.Namespace, max_staleness: int, generator: str, processes: int = 1
) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(model_preset(args.preset), device=args.device)
    config = OnlineRLConfig(
        episodes_per_round=args.episodes,
        group_size=GROUP,
        max_staleness=max_staleness,
        lr=args.lr,
        micro_batch_size=args.micro_batch,
        seed=0,
        episode=EpisodeConfig(
            max_turns=1, max_tokens_per_turn=args.reply_tokens, concurrency=args.episodes
        ),
        engine=EngineConfig(max_running=args.episodes),
        generator=generator,
        generators=processes,
    )
    source = load_environment("letter_or_digit", {"kinds": ["digit"]})
    rl = OnlineRL(config, model, ByteTokenizer(), source)
    synchronize()
    utilization: list[tuple[float, float]] = []
    sampler = _gpu_sampler(args, utilization)
    started = time.perf_counter()
    ends: list[float] = []
    rewards_so_far: list[float] = []

    def round_ended(health: Any) -> None:
        ends.append(time.perf_counter() - started)
        rewards_so_far.append(health.mean_reward or 0.0)

    def reached_target() -> bool:
        return bool(args.stop_at_target and rewards_so_far[-1] >= args.target)

    rl.on_round = round_ended
    try:
        history = rl.run(args.rounds, should_stop=reached_target)
    finally:
        rl.close()
        if sampler is not None:
            sampler.stop()
    busy = busy_share(utilization, started, started + ends[-1]) if ends else None
    rewards = [h.mean_reward or 0.0 for h in history]
    reached = next((i for i, r in enumerate(rewards) if r >= args.target), None)
    wall = sum(h.wall_s for h in history)
    return {
        "max_staleness": max_staleness,
        "generator": generator,
        "generators": processes,
        "rewards": [round(r, 4) for r in rewards],
        "rounds_to_target": None if reached is None else reached + 1,
        "seconds_to_target": None if reached is None else round(ends[reached], 2),
        "seconds": round(ends[-1], 2),
        # Every round's end, so the time to any other reward can be read off afterwards.
        "round_end_s": [round(end, 2) for end in ends],
        "episodes_per_s": round(sum(h.episodes for h in history) / ends[-1], 1),
        "idle_share": round(sum(h.idle_s for h in history) / wall, 3),
        "gpu_idle_share": None if busy is None else round(1.0 - busy, 3),
        "gpu_samples": len(utilization),
        "generate_s": round(sum(h.generate_s for h in history), 2),
        "train_s": round(sum(h.train_s for h in history), 2),
        "weight_update_s": round(sum(h.weight_update_s for h in history), 3),
        "staleness_max": [h.staleness_max for h in history],
    }


def _generator_settings(args: argparse.Namespace, sample: int) -> list[tuple[str, int]]:
    """(generator, processes) of each run of a sample: every --generators kind, and with
    `process` every --processes count, in alternating order from sample to sample."""
    settings = [
        (kind, count)
        for kind in args.generators
        for count in (args.processes if kind == "process" else [1])
    ]
    return settings if sample % 2 == 0 else settings[::-1]


def _gpu_sampler(args: argparse.Namespace, into: list[tuple[float, float]]) -> GpuSampler | None:
    """NVML's utilization of the run's GPU every 0.1 s, as (perf_counter time, percent)."""
    if not args.device.startswith("cuda"):
        return None
    gpus = NvmlGpus.open(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if isinstance(gpus, str):
        print(f"no GPU idle share: {gpus}", flush=True)
        return None
    index = torch.cuda.current_device()

    def keep(readings: list[GpuReading]) -> None:
        into.append((time.perf_counter(), readings[index].utilization))

    return GpuSampler(gpus, 0.1, keep)


def weights_part(args: argparse.Namespace, written: dict[str, Any]) -> None:
    """Appends to written["weights"], writing after each shape."""
    device = args.device
    results = written["weights"]
    source = load_environment("letter_or_digit", {"kinds": ["digit"]})
    for preset in ("124M", "1.3B"):
        for dtype in (torch.bfloat16, torch.float32):
            model = build_model(model_preset(preset), device=device).to(dtype)
            shared: dict[str, Any] = {
                "version": PolicyVersion(0),
                "engine_config": EngineConfig(),
                "episode_config": EpisodeConfig(),
                "sandbox": Sandbox(),
            }
            generator = Generator(model, ByteTokenizer(), source, **shared)
            directory = Path(tempfile.mkdtemp(prefix="crucible-weights-"))
            remote = RemoteGenerator(model, ByteTokenizer(), source, directory=directory, **shared)
            loads, snapshots, remote_loads = [], [], []
            for i in range(7):
                loads.append(generator.load_weights(model, PolicyVersion(i + 1)))
                remote_loads.append(remote.load_weights(model, PolicyVersion(i + 1)))
                synchronize()
                began = time.perf_counter()
                snapshot = weights_snapshot(model)
                synchronize()
                snapshots.append(time.perf_counter() - began)
                del snapshot
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            results.append(
                {
                    "preset": preset,
                    "dtype": str(dtype),
                    "bytes": size,
                    "load_ms": round(statistics.median(loads[2:]) * 1e3, 3),
                    "snapshot_ms": round(statistics.median(snapshots[2:]) * 1e3, 3),
                    "process_load_ms": round(statistics.median(remote_loads[2:]) * 1e3, 3),
                }
            )
            print(results[-1], flush=True)
            write(args, written)
            remote.close()
            del generator, remote, model
            if device == "cuda":
                torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--parts", nargs="+", choices=("rounds", "weights"), default=["rounds", "weights"]
    )
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument(
        "--first-sample", type=int, default=0, help="number of the first (one call per sample)"
    )
    parser.add_argument("--staleness", type=int, nargs="+", default=list(STALENESS))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--reply-tokens", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--micro-batch", type=int, default=64, help="rows per forward and backward (0: all)"
    )
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--stop-at-target", action="store_true")
    parser.add_argument("--preset", default="124M")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--generators", nargs="+", choices=("thread", "process"), default=["thread"]
    )
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1],
        help="generator processes sharing each batch (with --generators process)",
    )
    parser.add_argument("--out", default="online_rl.json")
    args = parser.parse_args()
    results: dict[str, Any] = {"rounds": [], "weights": []}
    for part in args.parts:
        if part == "rounds":
            for sample in range(args.first_sample, args.first_sample + args.samples):
                order = args.staleness if sample % 2 == 0 else args.staleness[::-1]
                for k in order:
                    for generator, processes in _generator_settings(args, sample):
                        run = rounds_run(args, k, generator, processes) | {"sample": sample}
                        results["rounds"].append(run)
                        print(run, flush=True)
                        # Written after every run, so a run cut off at the device's time
                        # limit still returns the ones that finished.
                        write(args, results)
        else:
            weights_part(args, results)
        write(args, results)


def write(args: argparse.Namespace, results: dict[str, Any]) -> None:
    write_result(
        out_dir() / args.out, {"benchmark": "online_rl", "args": vars(args), "results": results}
    )


if __name__ == "__main__":
    main()
