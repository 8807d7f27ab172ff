"""The built-in task: arithmetic problems such as "37+58=" -> "95".

Problems are deterministic from a seed, and the held-out split is decided by a hash of
the problem itself, so train and held-out are disjoint for every seed and sample size.
"""

import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from crucible.config.workload import TASK_OPERATORS, TaskConfig

Split = Literal["train", "held_out"]

OPERATORS = TASK_OPERATORS
_PROMPT = re.compile(r"^(\d+)([+\-*])(\d+)=$")


@dataclass(frozen=True)
class Problem:
    prompt: str
    """The question, e.g. "37+58="."""

    answer: str
    """The exact expected completion, e.g. "95"."""


class Teacher(Protocol):
    """Anything that answers prompts: the programmatic solver, or a checkpointed model
    (`rollout.ModelTeacher`) so that a stronger model can teach a weaker one."""

    def complete(self, prompts: Sequence[str]) -> list[str]: ...


def solve(prompt: str) -> str:
    """The exact answer to an arithmetic prompt like "37+58="."""
    match = _PROMPT.match(prompt)
    if match is None:
        raise ValueError(f"{prompt!r} is not an arithmetic prompt like '37+58='")
    a, op, b = int(match[1]), match[2], int(match[3])
    if op == "+":
        return str(a + b)
    if op == "-":
        return str(a - b)
    return str(a * b)


class SolverTeacher:
    """The programmatic teacher: always right."""

    def complete(self, prompts: Sequence[str]) -> list[str]:
        return [solve(p) for p in prompts]


def exact_match_reward(prompt: str, completion: str) -> float:
    """1.0 when the completion is exactly the answer (surrounding whitespace ignored)."""
    return 1.0 if completion.strip() == solve(prompt) else 0.0


class ArithmeticTask:
    def __init__(self, config: TaskConfig) -> None:
        # TaskConfig checked its own values: any TaskConfig can draw.
        self.config = config
        self._limit = int(10**config.digits)

    def split_of(self, prompt: str) -> Split:
        """Which split a prompt belongs to: a fixed hash, independent of any seed."""
        bucket = zlib.crc32(prompt.encode()) % 10_000
        return "held_out" if bucket < self.config.held_out_fraction * 10_000 else "train"

    @property
    def num_possible(self) -> int:
        return len(self.config.operators) * self._limit * self._limit

    def sample(self, split: Split, n: int, *, seed: int, unique: bool = False) -> list[Problem]:
        """`n` problems of `split`, the same for the same seed.

        unique=True draws without repetition (for evaluation) and returns fewer than `n`
        when the split holds fewer problems.
        """
        if split not in get_args(Split):  # drawing for a split no prompt is in never ends
            raise ValueError(f"unknown split {split!r}; one of {', '.join(get_args(Split))}")
        if unique and self.num_possible <= 100_000:
            pool = [p for p in self._all() if self.split_of(p.prompt) == split]
            # Reproducible task data, not secrets.
            random.Random(seed).shuffle(pool)  # noqa: S311
            return pool[:n]
        rng = random.Random(seed)  # noqa: S311
        problems: list[Problem] = []
        seen: set[str] = set()
        while len(problems) < n:
            a, b = rng.randrange(self._limit), rng.randrange(self._limit)
            prompt = f"{a}{rng.choice(self.config.operators)}{b}="
            if self.split_of(prompt) != split or (unique and prompt in seen):
                continue
            seen.add(prompt)
            problems.append(Problem(prompt, solve(prompt)))
        return problems

    def _all(self) -> list[Problem]:
        return [
            Problem(prompt, solve(prompt))
            for op in self.config.operators
            for a in range(self._limit)
            for b in range(self._limit)
            for prompt in [f"{a}{op}{b}="]
        ]
