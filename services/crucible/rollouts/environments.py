"""Environments: where a rollout's prompts come from and how its samples are scored, in one
object (docs/workloads.md, "Your own environment"). The arithmetic task is one."""

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from crucible.config.workload import TaskConfig
from crucible.tasks.arithmetic import ArithmeticTask


class Environment(Protocol):
    """What a rollout asks of an environment."""

    def prompts(self, count: int, seed: int) -> Sequence[Mapping[str, Any]]:
        """`count` prompt records, the same for the same seed: each a "prompt" (text) or
        "messages" (a chat), and any metadata `score` reads."""
        ...

    def score(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
    ) -> Sequence[float]:
        """One score per sample, as a reward: `metadata[i]` is the record of the prompt of
        sample i without its "prompt" field."""
        ...


class ArithmeticEnvironment:
    """The arithmetic task: train-split problems as `{"prompt": "3+4=", "answer": "7"}`,
    scored 1.0 where the completion is exactly the answer (surrounding whitespace ignored)."""

    def __init__(self, config: TaskConfig) -> None:
        self.task = ArithmeticTask(config)

    def prompts(self, count: int, seed: int) -> list[dict[str, Any]]:
        problems = self.task.sample("train", count, seed=seed)
        return [{"prompt": p.prompt, "answer": p.answer} for p in problems]

    def score(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
    ) -> list[float]:
        return [
            1.0 if completion.strip() == str(meta["answer"]).strip() else 0.0
            for completion, meta in zip(completions, metadata, strict=True)
        ]
