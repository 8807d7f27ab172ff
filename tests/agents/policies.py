"""Scripted policies: functions that write the assistant's messages, to show that the
reference environments can be solved and to drive the runner without a model."""

import json
import re
from collections.abc import Sequence
from typing import Any

from crucible.agents.protocol import Message, ScriptedPolicy
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


def task_tool_caller(*, arguments: dict[str, dict[str, Any]]) -> ScriptedPolicy:
    """A teacher (a factory, loaded by import path) for `broken_envs:OneTool`: call the tool
    the task names with its `arguments`, then say done."""

    def call(messages: Sequence[Message]) -> str:
        if messages[-1]["role"] == "tool":
            return "done"
        name = messages[-1]["content"].removeprefix("Call ").rstrip(".")
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments[name]})}</tool_call>"

    return call
