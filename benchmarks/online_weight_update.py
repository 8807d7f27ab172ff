"""The weight update of online RL on this machine's CPU: the trainer's new policy version
into a generator in the same process (copied in memory) and into one in a process of its
own (written to a safetensors file, which the generator process reads and copies in).

    .venv/bin/python -m benchmarks.online_weight_update

For the built-in GPT's `tiny`, `small` and `124M` presets in float32, `SAMPLES` updates
each, the two generators alternated, the weights changed before every update; the medians
and spreads go to benchmarks/results/online_weight_update.json (docs/agents.md, "A
generator in a process of its own"). The H200's figures for 124M and 1.3B come from
benchmarks/gpu/online_rl_bench.py.
"""

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from crucible.agents.loading import load_environment
from crucible.agents.policy import PolicyVersion
from crucible.agents.sandbox import Sandbox
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.generator import Generator
from crucible.online_rl.remote_generator import RemoteGenerator

PRESETS = ("tiny", "small", "124M")
SAMPLES = 5
RESULTS = Path(__file__).parent / "results" / "online_weight_update.json"


def spread(seconds: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(seconds), 5),
        "min_s": round(min(seconds), 5),
        "max_s": round(max(seconds), 5),
    }


def measure(preset: str, directory: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(model_preset(preset))
    source = load_environment("letter_or_digit")
    shared: dict[str, Any] = {
        "version": PolicyVersion(0),
        "engine_config": EngineConfig(num_blocks=64),
        "episode_config": EpisodeConfig(),
        "sandbox": Sandbox(),
    }
    here = Generator(model, ByteTokenizer(), source, **shared)
    there = RemoteGenerator(model, ByteTokenizer(), source, directory=directory, **shared)
    times: dict[str, list[float]] = {"thread": [], "process": []}
    try:
        for update in range(1, SAMPLES + 1):
            with torch.no_grad():  # a new version: every weight changed, as a step does
                for param in model.parameters():
                    param.add_(1e-3)
            version = PolicyVersion(update)
            times["thread"].append(here.load_weights(model, version))
            times["process"].append(there.load_weights(model, version))
    finally:
        there.close()
    parameters = sum(p.numel() for p in model.parameters())
    return {
        "preset": preset,
        "parameters": parameters,
        "megabytes": round(parameters * 4 / 1e6, 1),
        "samples": SAMPLES,
        **{name: spread(seconds) for name, seconds in times.items()},
    }


def main() -> None:
    torch.set_num_threads(2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crucible-weights-") as directory:
        for preset in PRESETS:
            rows.append(measure(preset, Path(directory)))
            print(rows[-1], flush=True)
    RESULTS.write_text(json.dumps({"device": "cpu, 2 cores", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
