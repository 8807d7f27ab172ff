"""Summarise the online-RL device runs (benchmarks/results/gpu/raw/online/) into
benchmarks/results/gpu/online_rl.json (the H100 calls, one sample each: per configuration,
the wall time and round to the target reward, samples/s and the trainer's idle share; per
model shape and dtype, the weight update times) and online_rl_h200.json (the H200 calls,
three samples of each configuration with the generator in a process: the same figures as
medians with their spread, and the GPU's own idle share from NVML).

    .venv/bin/python benchmarks/gpu/summarize_online.py
"""

import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu"
RAW = RESULTS / "raw" / "online"
ROUND_FILES = ("online_rounds_1.json", "online_rounds_2.json")
H200_FILES = ("online_h200_s0.json", "online_h200_s1.json", "online_h200_s2.json")


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


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median, min and max of the samples that have a value; how many had none."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return {"median": None, "missing": len(values)}
    return {
        "median": statistics.median(known),
        "min": known[0],
        "max": known[-1],
        "missing": len(values) - len(known),
    }


def h200_summary() -> dict[str, Any]:
    payloads = [json.loads((RAW / name).read_text()) for name in H200_FILES]
    runs = [run for payload in payloads for run in payload["results"]["rounds"]]
    target = payloads[0]["args"]["target"]
    configurations = []
    for staleness in sorted({run["max_staleness"] for run in runs}):
        mine = [run for run in runs if run["max_staleness"] == staleness]
        per_round = [len(run["rewards"]) for run in mine]
        configurations.append(
            {
                "max_staleness": staleness,
                "generator": mine[0]["generator"],
                "samples": len(mine),
                "rounds_to_target": spread([run["rounds_to_target"] for run in mine]),
                "seconds_to_target": spread([run["seconds_to_target"] for run in mine]),
                "reward_round_30_or_target": spread([run["rewards"][-1] for run in mine]),
                "episodes_per_s": spread([run["episodes_per_s"] for run in mine]),
                "trainer_idle_share": spread([run["idle_share"] for run in mine]),
                "gpu_idle_share": spread([run["gpu_idle_share"] for run in mine]),
                "generate_s_per_round": spread(
                    [round(r["generate_s"] / n, 2) for r, n in zip(mine, per_round, strict=True)]
                ),
                "train_s_per_round": spread(
                    [round(r["train_s"] / n, 2) for r, n in zip(mine, per_round, strict=True)]
                ),
                "weight_update_ms_per_round": spread(
                    [
                        round(1e3 * r["weight_update_s"] / n, 1)
                        for r, n in zip(mine, per_round, strict=True)
                    ]
                ),
            }
        )
    environment = payloads[0]["environment"]
    return {
        "benchmark": "online_rl",
        "device": f"{environment['device']}, torch {environment['torch']}",
        "date": "2026-12-05",
        "setup": {
            key: payloads[0]["args"][key]
            for key in (
                "preset",
                "episodes",
                "reply_tokens",
                "lr",
                "micro_batch",
                "target",
                "rounds",
            )
        }
        | {
            "stop_at_target": True,
            "seed": "0 in every sample: the samples repeat the timing of one learning curve",
        },
        "target": target,
        "configurations": configurations,
    }


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
    out = RESULTS / "online_rl_h200.json"
    out.write_text(json.dumps(h200_summary(), indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
