"""Environments that break their contract, or call tools that fail, loaded by import path
(`tests.agents.broken_envs:...`) as a team's own would be."""

from collections.abc import Mapping, Sequence
from typing import Any

from crucible.agents.protocol import Message, ToolResult, ToolSpec, Turn


class Base:
    """One user message, no tools, done after the first reply; subclasses break one thing."""

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        return [{"number": seed + i} for i in range(count)]

    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        return [{"role": "user", "content": f"Say {task['number']}."}]

    def tools(self) -> Sequence[ToolSpec]:
        return []

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        return Turn(reward=1.0, done=True)


class RaisesInReset(Base):
    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        raise RuntimeError(f"no such task {task['number']}")


class RaisesInStep(Base):
    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        raise KeyError("score")


class NanReward(Base):
    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        return Turn(reward=float("nan"), done=True)


class ReturnsADict(Base):
    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        return {"reward": 1.0, "done": True}


class AssistantInReset(Base):
    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        return [{"role": "assistant", "content": "I speak for the model"}]


class OneTool(Base):
    """Tasks that each name a tool of tests/agents/tools.py and its arguments: the episode
    calls it (the policy writes the call the task names), then is done."""

    def __init__(self, *, calls: Sequence[Mapping[str, Any]] = ()) -> None:
        self.calls = list(calls)
        self.tool = ""

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        return [dict(self.calls[i % len(self.calls)]) for i in range(count)]

    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        self.tool = str(task["name"])
        return [{"role": "user", "content": f"Call {self.tool}."}]

    def tools(self) -> Sequence[ToolSpec]:
        return [
            ToolSpec(
                name=self.tool,
                description="a test tool",
                parameters={"type": "object"},
                function=f"tests.agents.tools:{self.tool}",
            )
        ]

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        if tool_results:
            return Turn()
        return Turn(reward=1.0, done=True)


class SomeTasksBroken(Base):
    """Of each batch's tasks, the first ends with a NaN reward and the second raises in
    step(); the others reward a reply that starts with a digit."""

    def __init__(self) -> None:
        self.number = -1

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        return [{"number": i} for i in range(count)]

    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        self.number = int(task["number"])
        return super().reset(task)

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Any:
        if self.number == 0:
            return Turn(reward=float("nan"), done=True)
        if self.number == 1:
            raise KeyError("score")
        return Turn(reward=float(message["content"][:1].isdigit()), done=True)
