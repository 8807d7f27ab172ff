"""A hidden number from 1 to `high`, found by guessing with "higher" or "lower" after each
guess: a task of several turns, where the feedback is the only way in. Bisection finds it
within `budget` guesses; the reward falls with every guess past the first."""

import math
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from crucible.agents.protocol import Message, ToolResult, ToolSpec, Turn

_NUMBER = re.compile(r"-?\d+")


class GuessingEnvironment:
    """Reward (budget + 1 - guesses) / budget on the guess that finds it (1 for the first
    guess, 1/budget at bisection's worst, never below 0), 0 on every other turn; a reply
    without a number counts as a guess."""

    def __init__(self, *, high: int = 100) -> None:
        if isinstance(high, bool) or not isinstance(high, int) or high < 2:
            raise ValueError(f"high must be a whole number of at least 2, got {high!r}")
        self.high = high
        self.budget = math.ceil(math.log2(high)) + 1
        """Guesses that bisection needs at most."""
        self.hidden = 0
        self.guesses = 0

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        rng = random.Random(f"guessing:{self.high}:{seed}")  # noqa: S311 -- tasks, not secrets
        return [{"hidden": rng.randint(1, self.high)} for _ in range(count)]

    def reset(self, task: Mapping[str, Any]) -> list[Message]:
        self.hidden, self.guesses = int(task["hidden"]), 0
        return [
            {
                "role": "system",
                "content": f"I am thinking of a whole number from 1 to {self.high}. Guess it: "
                "reply with one number. After each guess I say higher or lower.",
            },
            {"role": "user", "content": "Your first guess?"},
        ]

    def tools(self) -> list[ToolSpec]:
        return []

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Turn:
        self.guesses += 1
        found = _NUMBER.search(message["content"])
        if found is None:
            return _say(f"Reply with one whole number from 1 to {self.high}.")
        guess = int(found.group())
        if guess < self.hidden:
            return _say("Higher.")
        if guess > self.hidden:
            return _say("Lower.")
        reward = max(0.0, (self.budget + 1 - self.guesses) / self.budget)
        return Turn(reward=reward, done=True, info={"guesses": self.guesses})


def _say(text: str) -> Turn:
    return Turn(observations=[{"role": "user", "content": text}])
