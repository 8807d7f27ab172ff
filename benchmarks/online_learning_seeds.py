"""Online RL's learning test over more seeds than the suite runs: where its tolerances come
from (docs/agents.md, "The learning test").

    .venv/bin/python -m benchmarks.online_learning_seeds

For seeds 0 to 10: `letter_or_digit` with digits at `max_staleness` 0 and 1 (20 rounds) and
2 (30 rounds; its first 20 are those a 20-round run has, which samples the same batches),
and the guessing game over 1 and 2 (20 rounds, synchronous), each with the settings of
tests/agents/test_online_learning.py. Records round 0's mean reward and the mean of the
last three rounds (for max_staleness 2 after 20 rounds too) in
benchmarks/results/online_learning_seeds.json. About 8 minutes on one core.
"""

import json
from pathlib import Path
from typing import Any

import torch
from tests.agents.online_runs import DIGITS_ROUNDS, GUESSING_ROUNDS, digits_run, guessing

from crucible.online_rl.health import RoundHealth

SEEDS = range(11)
RESULTS = Path(__file__).parent / "results" / "online_learning_seeds.json"


def summary(history: list[RoundHealth], rounds: int) -> dict[str, float]:
    rewards = [h.mean_reward if h.mean_reward is not None else 0.0 for h in history[:rounds]]
    return {"round_0": round(rewards[0], 4), "last_3": round(sum(rewards[-3:]) / 3, 4)}


def main() -> None:
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    for seed in SEEDS:
        for staleness, rounds in DIGITS_ROUNDS.items():
            history = digits_run(seed, staleness).run(rounds)
            row = {"task": "digits", "seed": seed, "max_staleness": staleness, "rounds": rounds}
            row |= summary(history, rounds)
            if rounds > 20:
                row["last_3_of_20"] = summary(history, 20)["last_3"]
            rows.append(row)
            print(row, flush=True)
        history = guessing(seed).run(GUESSING_ROUNDS)
        row = {"task": "guessing", "seed": seed, "max_staleness": 0, "rounds": GUESSING_ROUNDS}
        rows.append(row | summary(history, GUESSING_ROUNDS))
        print(rows[-1], flush=True)
    RESULTS.write_text(json.dumps({"runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
