"""GPU telemetry's cost to a training step (issue 27: at most 0.5% of a step).

    python3 benchmarks/gpu/telemetry_bench.py --out telemetry.json

A 124M GPT training step in bf16 autocast (AdamW, random tokens, `--batch` rows of 1,024)
is timed step by step (synchronized) in blocks of `--steps` steps, with the SDK's sampler
(`sdk/gpu_telemetry.py`: `NvmlGpus.read` every `interval` seconds on its thread, each
reading turned into the run's metrics by `as_metrics`, as `Run` does) off, at the default
10 s, and at 1 s and 0.1 s, which read 10 and 100 times as often: a cost too small to see
at 10 s shows, scaled, at 0.1 s. The blocks alternate (off, 10, 1, 0.1, 0.1, 1, 10, off,
...), `--repeats` times each; reported: each setting's median step and spread of the block
medians, its overhead against off, and one `read()` of every GPU timed alone (median of
200). Also kept: a reading of the GPU mid-training, to show what the run page plots.
"""

import argparse
import statistics
import time
from typing import Any

import torch
from common import out_dir, write_result

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.sdk.gpu_telemetry import GpuReading, GpuSampler, NvmlGpus, as_metrics

INTERVALS: tuple[float | None, ...] = (None, 10.0, 1.0, 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", default="telemetry.json")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(model_preset("124M"), device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, 256, (args.batch, 1025), device="cuda")

    def step() -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), tokens[:, 1:].flatten()
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - started

    for _ in range(10):
        step()
    gpus = NvmlGpus.open(None)
    if isinstance(gpus, str):
        raise SystemExit(f"no telemetry to measure: {gpus}")
    read_s = []
    for _ in range(200):
        started = time.perf_counter()
        gpus.read()
        read_s.append(time.perf_counter() - started)
    gpus.close()

    blocks: dict[str, list[float]] = {_name(i): [] for i in INTERVALS}
    steps: dict[str, list[float]] = {_name(i): [] for i in INTERVALS}
    reads: dict[str, int] = {_name(i): 0 for i in INTERVALS}
    sample: dict[str, float] = {}
    for repeat in range(args.repeats):
        order = INTERVALS if repeat % 2 == 0 else INTERVALS[::-1]
        for interval in order:
            sampler = None
            if interval is not None:
                opened = NvmlGpus.open(None)
                assert not isinstance(opened, str)
                logged: list[dict[str, float]] = []

                def sink(
                    readings: list[GpuReading], logged: list[dict[str, float]] = logged
                ) -> None:
                    logged.append(as_metrics(readings))

                sampler = GpuSampler(opened, interval, sink)
            times = [step() for _ in range(args.steps)]
            if sampler is not None:
                sampler.stop()
                reads[_name(interval)] += sampler.reads
                if logged:
                    sample = logged[-1]
            blocks[_name(interval)].append(statistics.median(times))
            steps[_name(interval)].extend(times)

    off = statistics.median(blocks["off"])
    results: dict[str, Any] = {
        "read_all_gpus_ms": round(1e3 * statistics.median(read_s), 4),
        "gpus": len(gpus.indices),
        "settings": {},
        "reading_mid_training": sample,
    }
    for name, medians in blocks.items():
        median = statistics.median(medians)
        results["settings"][name] = {
            "median_step_ms": round(1e3 * median, 3),
            "block_medians_ms": [round(1e3 * m, 3) for m in medians],
            "overhead_vs_off": round(median / off - 1.0, 5),
            "reads": reads[name],
            "steps": len(steps[name]),
        }
        print(name, results["settings"][name], flush=True)
    print("one read of every GPU:", results["read_all_gpus_ms"], "ms")
    write_result(
        out_dir() / args.out,
        {"benchmark": "telemetry", "args": vars(args), "results": results},
    )


def _name(interval: float | None) -> str:
    return "off" if interval is None else f"every {interval:g} s"


if __name__ == "__main__":
    main()
