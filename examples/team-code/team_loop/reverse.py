"""A multi-turn environment with a tool, named by import path (`team_loop.reverse:ReverseWord`)
and found on the run's workingDir: the model may ask the tool to reverse a word, then
answers."""

from collections.abc import Mapping, Sequence
from typing import Any

from crucible.extensions import Message, ToolResult, ToolSpec, Turn


def reverse(text: str) -> str:
    """The tool: run in the sandbox, found there by its import path."""
    return text[::-1]


class ReverseWord:
    """Reverse a word: reward 1 for "Answer: <the word reversed>", 0 for another answer."""

    def __init__(self, *, words: Sequence[str] = ("crucible", "sandbox", "episode")) -> None:
        if isinstance(words, str) or not words:
            raise ValueError(f"words must be a non-empty list of words, got {words!r}")
        self.words = list(words)
        self.word = ""

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` tasks, the same for the same seed."""
        return [{"word": self.words[(seed + i) % len(self.words)]} for i in range(count)]

    def reset(self, task: Mapping[str, Any]) -> list[Message]:
        self.word = task["word"]
        return [{"role": "user", "content": f"Reverse the word {self.word}. Reply: Answer: <word>"}]

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name="reverse",
                description="The letters of a text in reverse order.",
                parameters={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                function=reverse,
            )
        ]

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Turn:
        if tool_results:  # already in the conversation as tool messages: the model goes on
            return Turn()
        answer = message["content"].partition("Answer:")[2].strip()
        return Turn(reward=1.0 if answer == self.word[::-1] else 0.0, done=True)
