"""The figures docs/agents.md quotes of examples/calculator-rl.yaml's online RL run, read from
a finished run of it: its trajectories (per round, how many episodes answered without the
tool, the mean reward) and its checkpoints' `agent-environment` evals (from the eval runs'
logs).

    .venv/bin/python -m pytest tests/cli/test_calculator_example.py
    .venv/bin/python -m benchmarks.calculator_example_figures \\
        /tmp/pytest-of-$USER/pytest-current/test_the_calculator_example_lecurrent/home

writes benchmarks/results/calculator_example.json.
"""

import json
import re
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "calculator_example.json"
_EVAL = re.compile(
    r"agent-environment on checkpoint \d+ \(run (\d+), step (\d+)\): mean_reward ([\d.]+).*"
    r"tool_calls_per_episode ([\d.]+)"
)


def rounds(trajectories: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(trajectories.glob("batch-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        with_tool = [r for r in records if _called_the_tool(r)]
        found.append(
            {
                "round": len(found) + 1,
                "episodes": len(records),
                "without_tool": len(records) - len(with_tool),
                "with_tool_right": sum(r["reward"] == 1.0 for r in with_tool),
                "mean_reward": round(sum(r["reward"] for r in records) / len(records), 4),
            }
        )
    return found


def _called_the_tool(record: dict[str, Any]) -> bool:
    """Whether the episode's first reply was a tool call."""
    first = next(m for m in record["messages"] if m["role"] == "assistant")
    return bool(first["content"].startswith("<tool_call>"))


def main() -> None:
    home = Path(sys.argv[1])
    runs = home / "runs"
    (rl,) = [p.parent.parent for p in runs.glob("*/outputs/trajectories")]
    evals = []
    for log in sorted(runs.glob("*/attempt-*.log")):
        for match in _EVAL.finditer(log.read_text()):
            if match.group(1) == rl.name:
                evals.append(
                    {
                        "step": int(match.group(2)),
                        "mean_reward": float(match.group(3)),
                        "tool_calls_per_episode": float(match.group(4)),
                    }
                )
    result = {
        "example": "examples/calculator-rl.yaml",
        "rounds": rounds(rl / "outputs" / "trajectories"),
        "evals": sorted(evals, key=lambda e: e["step"]),
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
