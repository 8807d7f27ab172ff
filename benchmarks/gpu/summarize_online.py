"""Summarise the online-RL device runs (benchmarks/results/gpu/raw/online/) into
benchmarks/results/gpu/online_rl.json: per configuration, the wall time and round to the
target reward, samples/s and the trainer's idle share; per model shape and dtype, the
weight update times.

    .venv/bin/python benchmarks/gpu/summarize_online.py
"""

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu"
RAW = RESULTS / "raw" / "online"
ROUND_FILES = ("online_rounds_1.json", "online_rounds_2.json")


def reward_reached(run: dict[str, Any], target: float) -> dict[str, Any]:
    """The first round at or above `target` and the seconds to its end (None: not reached)."""
    for number, (reward, end) in enumerate(zip(run["rewards"], run["round_end_s"], strict=True)):
        if reward >= target:
            return {"round": number + 1, "seconds": end}
    return {"round": None, "seconds": None}


def rounds_summary() -> list[dict[str, Any]]:
    rows = []
    for name in ROUND_FILES:
        payload = json.loads((RAW / name).read_text())
        target = payload["args"]["target"]
        for run in payload["results"]["rounds"]:
            rows.append(
                {
                    "file": name,
                    "max_staleness": run["max_staleness"],
                    "generator": run["generator"],
                    f"to_reward_{target}": reward_reached(run, target),
                    "to_reward_0.5": reward_reached(run, 0.5),
                    "reward_last_round": run["rewards"][-1],
                    "rounds": len(run["rewards"]),
                    "seconds": run["seconds"],
                    "episodes_per_s": run["episodes_per_s"],
                    "trainer_idle_share": run["idle_share"],
                    "generate_s_per_round": round(run["generate_s"] / len(run["rewards"]), 2),
                    "train_s_per_round": round(run["train_s"] / len(run["rewards"]), 2),
                    "weight_update_ms_per_round": round(
                        1e3 * run["weight_update_s"] / len(run["rewards"]), 1
                    ),
                }
            )
    return rows


def main() -> None:
    first = json.loads((RAW / ROUND_FILES[0]).read_text())
    weights = json.loads((RAW / "online_weights.json").read_text())
    summary = {
        "benchmark": "online_rl",
        "device": "NVIDIA H100 80GB HBM3 (nvidia-h200 asked, an H100 came), torch 2.11.0+cu130",
        "date": "2026-12-05",
        "setup": {
            key: first["args"][key]
            for key in ("preset", "episodes", "reply_tokens", "lr", "micro_batch", "target")
        },
        "samples": 1,
        "rounds": rounds_summary(),
        "weights": weights["results"]["weights"],
        "not_run": [
            "max_staleness 1 with the generator in a process (the call reached its limit)",
            "second and third samples of every configuration (device time spent)",
            "the GPU's own idle share (NVML); trainer_idle_share is the trainer's wait",
        ],
    }
    out = RESULTS / "online_rl.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
