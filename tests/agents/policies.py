"""Scripted policies: functions that write the assistant's messages, to show that the
reference environments can be solved and to drive the runner without a model."""

import json
import re
from collections.abc import Sequence

from crucible.agents.protocol import Message

_QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")
_RANGE = re.compile(r"from 1 to (\d+)")
_NUMBER = re.compile(r"-?\d+")


def calculator(messages: Sequence[Message]) -> str:
    """Ask the tool, then give the number it returned as the answer."""
    last = messages[-1]
    if last["role"] == "tool":
        (result, *_) = [m["content"] for m in reversed(messages) if _NUMBER.fullmatch(m["content"])]
        return f"Answer: {result}"
    a, op, b = _QUESTION.search(last["content"]).groups()  # type: ignore[union-attr]
    call = {"name": "calculate", "arguments": {"expression": f"{a} {op} {b}"}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def bisection(messages: Sequence[Message]) -> str:
    """Guess the middle of what the feedback so far leaves open."""
    low, high = 1, int(_RANGE.search(messages[0]["content"]).group(1))  # type: ignore[union-attr]
    for guess, feedback in zip(messages[2::2], messages[3::2], strict=False):
        if feedback["content"] == "Higher.":
            low = int(guess["content"]) + 1
        elif feedback["content"] == "Lower.":
            high = int(guess["content"]) - 1
    return str((low + high) // 2)
