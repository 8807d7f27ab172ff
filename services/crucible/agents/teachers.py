"""Scripted teachers: code that writes the assistant's messages in an agent environment, to
make demonstrations to fine-tune a policy on before online RL (`jobs/episodes.py`).

A teacher is a factory, `teacher(**options)`, returning the policy: a function from the
conversation so far (the messages as the runner keeps them: system with the tools, user,
assistant, tool) to the assistant's next message. It is loaded by a built-in's name or an
import path (`loading.load_teacher`), and the factory is called once at load time, so that
a bad option is an error naming the options field before any episode runs.
"""

import hashlib
import json
import re
from collections.abc import Sequence

from crucible.agents.envs.calculator import calculate
from crucible.agents.protocol import Message, ScriptedPolicy

_QUESTION = re.compile(r"What is (.+)\?")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def calculator_solver(*, tool_share: float = 1.0) -> ScriptedPolicy:
    """A teacher for `calculator`: on a `tool_share` of the tasks it calls `calculate` on
    the question and answers with the result; on the others it answers at once, rightly,
    working the number out itself. Which tasks get the tool follows from the question's
    hash, so a task is always solved the same way.

    Below 1 it teaches a model what a small one cannot do: the direct answers are right, but
    a model that imitates them writes wrong numbers. What online RL then has to teach is to
    call the tool every time."""
    if isinstance(tool_share, bool) or not isinstance(tool_share, int | float):
        raise ValueError(f"tool_share must be a number from 0 to 1, got {tool_share!r}")
    if not 0 <= tool_share <= 1:
        raise ValueError(f"tool_share must be from 0 to 1, got {tool_share!r}")

    def solve(messages: Sequence[Message]) -> str:
        if messages[-1]["role"] == "tool":
            # The last number a tool gave: other calls of the turn may have been refused.
            results = [m["content"] for m in messages if m["role"] == "tool"]
            return f"Answer: {next(r for r in reversed(results) if _NUMBER.fullmatch(r))}"
        question = next(m["content"] for m in messages if m["role"] == "user")
        found = _QUESTION.search(question)
        if found is None:
            raise ValueError(f"calculator_solver: no 'What is ...?' in the task {question!r}")
        expression = found.group(1)
        if _share(question) >= tool_share:
            return f"Answer: {calculate(expression)}"
        call = {"name": "calculate", "arguments": {"expression": expression}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    return solve


def _share(text: str) -> float:
    """A number in [0, 1) fixed by `text`, spread evenly over texts."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64
