"""Turn the raw device outputs (benchmarks/results/gpu/raw/run*/) into the committed results
files with targets and met/missed, and draw the bf16-vs-fp8 loss curves.

    .venv/bin/python benchmarks/gpu/summarize.py
"""

import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu"
RAW = RESULTS / "raw"


def load(path: str) -> dict[str, Any]:
    return json.loads((RAW / path).read_text())  # type: ignore[no-any-return]


def runs_by_name(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["run"]: r for r in payload["runs"]}


def main() -> None:
    one = load("run1/train_1gpu.json")
    two = load("run3/train_2gpu.json")
    single, double = runs_by_name(one), runs_by_name(two)
    bf16_13, fp8_13 = single["1.3B-bf16-mb16"], single["1.3B-fp8-mb16"]
    training = {
        "environment": one["environment"],
        "config": "seq 1024, bf16 autocast, fused AdamW, torch.compile, no activation "
        "checkpointing; 30 timed steps after 8 warm-up steps; MFU against 989 TFLOP/s",
        "single_gpu": one["runs"],
        "two_gpu_fsdp": two["runs"],
        "targets": [
            {
                "what": "MFU 1.3B bf16, 1 GPU",
                "target": 0.55,
                "measured": bf16_13["mfu"],
                "met": bf16_13["mfu"] >= 0.55,
            },
            {
                "what": "MFU 124M bf16, 1 GPU",
                "target": 0.50,
                "measured": single["124M-bf16-mb32"]["mfu"],
                "met": single["124M-bf16-mb32"]["mfu"] >= 0.50,
            },
        ],
    }
    for preset, mb in (("124M", 32), ("1.3B", 16)):
        name = f"{preset}-bf16-mb{mb}"
        efficiency = double[name]["tokens_per_s"] / (2 * single[name]["tokens_per_s"])
        training["targets"].append(
            {
                "what": f"2-GPU scaling efficiency {preset} (FSDP2 vs 2x one GPU)",
                "target": 0.90,
                "measured": round(efficiency, 3),
                "met": efficiency >= 0.90,
            }
        )
    (RESULTS / "training.json").write_text(json.dumps(training, indent=2) + "\n")

    bf16_curve = load("run2/curve_bf16.json")["runs"][0]
    fp8_curve = load("run2/curve_fp8.json")["runs"][0]
    tail = 50
    bf16_end = statistics.fmean(bf16_curve["losses"][-tail:])
    fp8_end = statistics.fmean(fp8_curve["losses"][-tail:])
    speedup = fp8_13["tokens_per_s"] / bf16_13["tokens_per_s"]
    curve_speedup = fp8_curve["tokens_per_s"] / bf16_curve["tokens_per_s"]
    fp8 = {
        "environment": load("run2/curve_fp8.json")["environment"],
        "config": "1.3B, 2,000 steps of 8 x 1,024 bytes of the torch sources (same order for "
        "both), lr 3e-4 cosine, warmup 100; fp8 = block Linears in e4m3/e5m2 with dynamic "
        "per-tensor scales, head bf16",
        "throughput_mb16": {"bf16": bf16_13, "fp8": fp8_13, "speedup": round(speedup, 3)},
        "curve_runs": {
            k: {x: v for x, v in run.items() if x not in ("losses", "fp8_stats")}
            for k, run in (("bf16", bf16_curve), ("fp8", fp8_curve))
        },
        "final_loss_mean_last_50": {"bf16": round(bf16_end, 4), "fp8": round(fp8_end, 4)},
        "fp8_stats_last": fp8_curve["fp8_stats"][max(fp8_curve["fp8_stats"], key=int)],
        "targets": [
            {
                "what": "fp8 tokens/s over bf16 at 1.3B (micro-batch 16)",
                "target": 1.25,
                "measured": round(speedup, 3),
                "met": speedup >= 1.25,
            },
            {
                "what": "fp8 tokens/s over bf16 at 1.3B in the 2,000-step runs (micro-batch 8)",
                "target": 1.25,
                "measured": round(curve_speedup, 3),
                "met": curve_speedup >= 1.25,
            },
            {
                "what": "fp8 final loss within 1% of bf16 after 2,000 steps (mean of last 50)",
                "target": 0.01,
                "measured": round(abs(fp8_end - bf16_end) / bf16_end, 4),
                "met": abs(fp8_end - bf16_end) / bf16_end <= 0.01,
            },
        ],
    }
    (RESULTS / "fp8.json").write_text(json.dumps(fp8, indent=2) + "\n")
    plot(bf16_curve["losses"], fp8_curve["losses"])

    # run4 measures the committed generator (sorting top-p) against the bisecting one
    # and HF in one call; run1 and run3 are the earlier versions, kept for the record.
    rollout = load("run4/rollout.json")
    rollout["earlier_runs"] = {
        "run1_sort_top_p_no_compile": load("run1/rollout.json")["results"],
        "run3_bisect_top_p": load("run3/rollout.json")["results"],
    }
    rollout["targets"] = [
        {
            "what": f"speed-up over HF generate at batch {r['batch']}",
            "target": r["target_speedup"],
            "measured": r["speedup_vs_hf"],
            "met": r["met"],
        }
        for r in rollout["results"]
        if "target_speedup" in r
    ]
    (RESULTS / "rollout.json").write_text(json.dumps(rollout, indent=2) + "\n")

    checkpoint = load("run3/checkpoint.json")
    (RESULTS / "checkpoint.json").write_text(json.dumps(checkpoint, indent=2) + "\n")


def plot(bf16: list[float], fp8: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(values: list[float], window: int = 20) -> list[float]:
        return [
            statistics.fmean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))
        ]

    figure, axis = plt.subplots(figsize=(8, 4.5))
    axis.plot(range(1, len(bf16) + 1), smooth(bf16), label="bf16")
    axis.plot(range(1, len(fp8) + 1), smooth(fp8), label="fp8 (e4m3 fwd / e5m2 grad)")
    axis.set_xlabel("step")
    axis.set_ylabel("training loss (20-step mean)")
    axis.set_ylim(top=min(max(bf16[50:] + fp8[50:]), 6.0))
    axis.set_title("GPT 1.3B on one H200: bf16 vs fp8, same data")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(RESULTS / "fp8_vs_bf16_loss.png", dpi=120)


if __name__ == "__main__":
    main()
