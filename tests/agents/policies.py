"""Scripted policies: functions that write the assistant's messages, to show that the
reference environments can be solved and to drive the runner without a model."""

import re
from collections.abc import Sequence

from crucible.agents.protocol import Message
from crucible.agents.teachers import calculator_solver

_RANGE = re.compile(r"from 1 to (\d+)")


calculator = calculator_solver()
"""Ask the tool, then give the number it returned as the answer (the built-in teacher)."""


def bisection(messages: Sequence[Message]) -> str:
    """Guess the middle of what the feedback so far leaves open."""
    low, high = 1, int(_RANGE.search(messages[0]["content"]).group(1))  # type: ignore[union-attr]
    for guess, feedback in zip(messages[2::2], messages[3::2], strict=False):
        if feedback["content"] == "Higher.":
            low = int(guess["content"]) + 1
        elif feedback["content"] == "Lower.":
            high = int(guess["content"]) - 1
    return str((low + high) // 2)
