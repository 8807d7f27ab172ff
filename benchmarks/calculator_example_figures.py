"""The figures docs/agents.md quotes of examples/calculator-rl.yaml's online RL run, read from
a finished run of it: its trajectories (per round, how many episodes answered without the
tool, the mean reward) and its checkpoints' `agent-environment` evals (from the eval runs'
logs).

    .venv/bin/python -m pytest tests/cli/test_calculator_example.py
    .venv/bin/python -m benchmarks.calculator_example_figures \\
        /tmp/pytest-of-$USER/pytest-current/test_the_calculator_example_lecurrent/home

adds the run to benchmarks/results/calculator_example.json, replacing an earlier one of the
same CPU. The file keeps one run per CPU model and the kernels torch picked for it (its CPU
capability) because the rewards depend on both: the run is deterministic on one machine, but
CPU matmul kernels sum in an order of their own, so another CPU trains another SFT checkpoint
from the same seed, and RL goes on from there. One model name ("AMD EPYC") is reported by
machines with AVX2 and with AVX-512, whose runs differ from the first round. What each
round played (its episodes' indexes, seeds and tasks) does not depend on the CPU: the file
keeps one digest a round, and refuses a run whose digests differ.
"""

import datetime
import hashlib
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from benchmarks.demo_loop import cpu_model

RESULTS = Path(__file__).parent / "results" / "calculator_example.json"
EXAMPLE = "examples/calculator-rl.yaml"
_EVAL = re.compile(
    r"agent-environment on checkpoint \d+ \(run (\d+), step (\d+)\): mean_reward ([\d.]+).*"
    r"tool_calls_per_episode ([\d.]+)"
)


def batches(trajectories: Path) -> list[list[dict[str, Any]]]:
    """Each round's episodes, in the order of their index."""
    return [
        sorted((json.loads(line) for line in path.read_text().splitlines()), key=_index)
        for path in sorted(trajectories.glob("batch-*.jsonl"))
    ]


def _index(record: dict[str, Any]) -> int:
    return int(record["index"])


def played_digest(records: list[dict[str, Any]]) -> str:
    """What a round played, whatever the policy answered: each episode's index, seed and
    task. A resume that lost, repeated or reordered a batch changes it."""
    played = [[r["index"], r["seed"], r["task"]] for r in records]
    return hashlib.sha256(json.dumps(played, sort_keys=True).encode()).hexdigest()[:16]


def played_digests(trajectories: Path) -> list[str]:
    return [played_digest(records) for records in batches(trajectories)]


def recorded() -> dict[str, Any]:
    return json.loads(RESULTS.read_text())  # type: ignore[no-any-return]


def rewards_recorded_here() -> list[float] | None:
    """Each round's mean reward in the run recorded on this machine's CPU; None, with a
    warning that says so, where none was."""
    here = this_cpu()
    run = next((r for r in recorded()["runs"] if same_cpu(r, here)), None)
    if run is None:
        warnings.warn(
            f"no run of {EXAMPLE} is recorded on this CPU ({here['cpu']}, "
            f"{here['torch_cpu_capability']}), so its rewards are not compared; record one "
            "with benchmarks/calculator_example_figures.py",
            stacklevel=2,
        )
        return None
    return [r["mean_reward"] for r in run["rounds"]]


def this_cpu() -> dict[str, str]:
    import torch  # only here: the figures' readers that do not compare rewards need none

    # The kernels torch picked for this CPU, which decide the order of its sums.
    return {"cpu": cpu_model(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def same_cpu(run: dict[str, Any], here: dict[str, str]) -> bool:
    """Whether `run` was recorded on a CPU like this one. A run recorded before the
    capability was kept matches on the model name alone."""
    capability = run.get("torch_cpu_capability", here["torch_cpu_capability"])
    return bool(run["cpu"] == here["cpu"] and capability == here["torch_cpu_capability"])


def rounds(trajectories: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for records in batches(trajectories):
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


def evals(runs: Path, rl_run: str) -> list[dict[str, Any]]:
    found = []
    for log in sorted(runs.glob("*/attempt-*.log")):
        for match in _EVAL.finditer(log.read_text()):
            if match.group(1) == rl_run:
                found.append(
                    {
                        "step": int(match.group(2)),
                        "mean_reward": float(match.group(3)),
                        "tool_calls_per_episode": float(match.group(4)),
                    }
                )
    return sorted(found, key=lambda e: e["step"])


def main() -> None:
    runs = Path(sys.argv[1]) / "runs"
    (rl,) = [p.parent.parent for p in runs.glob("*/outputs/trajectories")]
    trajectories = rl / "outputs" / "trajectories"
    digests = played_digests(trajectories)
    result = recorded() if RESULTS.exists() else {"runs": []}
    if result.get("played", digests) != digests:
        raise SystemExit(
            f"{trajectories} played other episodes than the runs in {RESULTS}: "
            f"digests {digests} against {result['played']}"
        )
    here = this_cpu()
    run = {
        **here,
        "date": datetime.date.today().isoformat(),
        "rounds": rounds(trajectories),
        "evals": evals(runs, rl.name),
    }
    result = {
        "example": EXAMPLE,
        "played": digests,
        "runs": [r for r in result["runs"] if not same_cpu(r, here)] + [run],
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(run))


if __name__ == "__main__":
    main()
