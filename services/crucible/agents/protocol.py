"""The contract of a multi-turn environment (docs/agents.md, "The protocol").

An environment is built by a factory named by import path (`package.module:Factory`) with
options, once per episode: `reset(task)` opens the conversation, and `step(message,
tool_results)` answers every assistant message with a `Turn`. The tools it declares are run
by the runner, in the sandbox, never by the environment itself: an environment only sees
their results.

This module imports nothing heavy: the sandbox's child process imports tool modules, and a
tool module may import this one for `ToolSpec`.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, Any]
"""A chat message, as `crucible.models.chat` renders it: {"role", "content"}, and "name"
on a tool message."""

ScriptedPolicy = Callable[[Sequence[Message]], str]
"""A policy written as code (a teacher, a test's): the conversation so far -> the
assistant's next message."""

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: shown to it by name, description and parameters, run in
    the sandbox by import path."""

    name: str
    """What the model writes in a call: letters, digits, `_`, `.`, `-`."""

    description: str
    parameters: Mapping[str, Any]
    """A JSON schema of an object, {"type": "object", "properties": {...}, "required":
    [...]}: what the model is told, and what a call's arguments are checked against before
    anything runs (names, required ones, and the JSON type of each)."""

    function: str | Callable[..., Any]
    """The tool's code: an import path `package.module:function`, or a module-level function
    (sent to the sandbox by its import path, as pickle would). It is called with the
    arguments as keyword arguments and returns a string or a JSON value."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1 to 64 letters, digits, '_', '.' or '-', "
                "starting with a letter or '_'"
            )
        if self.parameters.get("type", "object") != "object":
            raise ValueError(
                f"tool {self.name}: parameters must be a JSON schema of type 'object', got "
                f"type {self.parameters.get('type')!r}"
            )
        _import_path(self.name, self.function)  # a bad function fails here, not at a call

    @property
    def target(self) -> str:
        """The import path the sandbox runs."""
        return _import_path(self.name, self.function)


def _import_path(name: str, function: str | Callable[..., Any]) -> str:
    if isinstance(function, str):
        module, colon, attribute = function.partition(":")
        if not (colon and module and attribute):
            raise ValueError(
                f"tool {name}: function {function!r} is not an import path package.module:function"
            )
        return function
    module_name = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", "")
    if not callable(function) or not module_name or not qualname or "<" in qualname:
        raise ValueError(
            f"tool {name}: function {function!r} is neither an import path nor a "
            "module-level function (a lambda or a nested function cannot be run in "
            "another process)"
        )
    return f"{module_name}:{qualname}"


@dataclass(frozen=True)
class ToolResult:
    """One tool call of an assistant message, as the environment sees it once it has run
    (or could not be run)."""

    name: str | None
    """The tool called; None when the call could not be parsed."""

    arguments: Mapping[str, Any]
    content: str
    """What the tool message shows the model: the tool's result, or why it did not run."""

    error: str | None = None
    """Why the call was not run (unparseable, unknown tool, arguments that do not fit);
    None when it ran."""


@dataclass(frozen=True)
class Turn:
    """An environment's answer to one assistant message."""

    observations: Sequence[Message] = ()
    """Messages added after the tool results: feedback as a "user" message, usually."""

    reward: float = 0.0
    """This turn's reward; an episode's reward is the sum over its turns."""

    done: bool = False
    """The episode is over (the task solved or failed for good)."""

    info: Mapping[str, Any] = field(default_factory=dict)
    """Anything worth keeping in the trajectory (JSON values)."""


class AgentEnvironment(Protocol):
    """What the runner asks of a multi-turn environment: one object per episode."""

    def tasks(self, count: int, seed: int) -> Sequence[Mapping[str, Any]]:
        """`count` tasks (JSON mappings), the same for the same seed."""
        ...

    def reset(self, task: Mapping[str, Any]) -> Sequence[Message]:
        """Start an episode on `task`: the opening messages ("system" and "user")."""
        ...

    def tools(self) -> Sequence[ToolSpec]:
        """The tools the model may call in this episode (asked after `reset`); none is []."""
        ...

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Turn:
        """The model's message (role "assistant") and the results of the tool calls in it,
        in their order (already in the conversation as "tool" messages)."""
        ...
