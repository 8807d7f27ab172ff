"""Reply with a letter, or with a digit, as the task asks: one turn, reward 1 when the
reply's first character is of the kind asked for.

The reference environment of online RL's learning test. A small model with fresh weights
samples nearly uniformly over the byte tokenizer's ids, so it finds the reward by chance
often enough (52 letters, 10 digits) for the group baseline to have something to compare.
With one kind the policy need only favour its characters; with both it must read the task,
and a small model often settles on one kind for every task instead, a reward of 0.5 that
no group's rewards differ on, so no gradient leaves it. It measures nothing else.
"""

import random
import string
from collections.abc import Mapping, Sequence
from typing import Any

from crucible.agents.protocol import Message, ToolResult, ToolSpec, Turn

KINDS: Mapping[str, str] = {"letter": string.ascii_letters, "digit": string.digits}
"""The kinds a task asks for, and the characters each accepts."""


class LetterOrDigitEnvironment:
    """Reward 1 when the reply starts with a character of the asked kind, else 0."""

    def __init__(self, *, kinds: Sequence[str] = ("letter", "digit")) -> None:
        if isinstance(kinds, str) or not kinds or any(k not in KINDS for k in kinds):
            raise ValueError(f"kinds must be a non-empty list of {sorted(KINDS)}, got {kinds!r}")
        self.kinds = sorted(set(kinds))
        self.kind = ""

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        """The kinds in turn from a seeded start: a batch asks for each about as often, so
        its mean reward does not swing with the draw."""
        start = random.Random(f"letter_or_digit:{seed}").randrange(len(self.kinds))  # noqa: S311
        return [{"kind": self.kinds[(start + i) % len(self.kinds)]} for i in range(count)]

    def reset(self, task: Mapping[str, Any]) -> list[Message]:
        self.kind = str(task["kind"])
        if self.kind not in KINDS:
            raise ValueError(f"task kind {self.kind!r} is not one of {sorted(KINDS)}")
        return [{"role": "user", "content": f"Reply with one {self.kind}."}]

    def tools(self) -> list[ToolSpec]:
        return []

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Turn:
        first = message["content"][:1]
        reward = 1.0 if first and first in KINDS[self.kind] else 0.0
        return Turn(reward=reward, done=True, info={"first": first})
