"""Tool calls as a model writes them, in the Hermes convention that Qwen's templates also use:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` anywhere in an assistant message.

What the model is told of the tools (`tools_prompt`) and how a result comes back to it
(`tool_message`) live here too, so the format is written down in one place.
"""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crucible.agents.protocol import Message, ToolSpec

_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.S)

_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CallError:
    """A `<tool_call>` that is not a call: the text inside it, and what is wrong."""

    text: str
    problem: str


def parse_tool_calls(text: str) -> list[ToolCall | CallError]:
    """Every `<tool_call>` of `text`, in order: a call, or why it is not one."""
    found: list[ToolCall | CallError] = []
    for match in _CALL.finditer(text):
        inside, closing = match.group(1).strip(), match.group(2)
        if not closing:
            found.append(CallError(inside, "<tool_call> is not closed by </tool_call>"))
            continue
        found.append(_call(inside))
    return found


def _call(inside: str) -> ToolCall | CallError:
    try:
        value = json.loads(inside)
    except json.JSONDecodeError as exc:
        return CallError(inside, f"the call is not JSON ({exc})")
    if not isinstance(value, dict):
        return CallError(inside, f"the call is a JSON {type(value).__name__}, not an object")
    name, arguments = value.get("name"), value.get("arguments", {})
    if not isinstance(name, str) or not name:
        return CallError(inside, 'the call has no "name" string')
    if not isinstance(arguments, dict):
        return CallError(inside, f'the "arguments" of {name} are not a JSON object')
    return ToolCall(name, arguments)


def call_problem(call: ToolCall, tools: Mapping[str, ToolSpec]) -> str | None:
    """Why `call` cannot run with these tools (unknown name, arguments that do not fit the
    tool's parameters), or None."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(tools) or "none"
        return f"there is no tool named {call.name!r} (tools: {known})"
    properties: Mapping[str, Any] | None = tool.parameters.get("properties")
    missing = [n for n in tool.parameters.get("required", []) if n not in call.arguments]
    if missing:
        return f"{call.name} needs the argument {missing[0]!r}"
    if properties is None:
        return None  # a schema without properties takes any arguments
    for argument, value in call.arguments.items():
        if argument not in properties:
            known = ", ".join(properties) or "none"
            return f"{call.name} has no argument {argument!r} (its arguments: {known})"
        wanted = properties[argument].get("type")
        types = _JSON_TYPES.get(wanted) if isinstance(wanted, str) else None
        # JSON's true is not a number, though Python's bool is an int.
        mismatch = types is not None and (
            not isinstance(value, types) or (isinstance(value, bool) and wanted != "boolean")
        )
        if mismatch:
            return f"{call.name}'s argument {argument!r} must be of type {wanted}, got {value!r}"
    return None


def tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """What a system message tells the model of the tools and of how to call them."""
    described = "\n".join(
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            sort_keys=True,
        )
        for t in tools
    )
    return (
        f"You may call these tools:\n<tools>\n{described}\n</tools>\n"
        'To call one, write <tool_call>{"name": NAME, "arguments": {...}}</tool_call>; '
        "its result comes back in a tool message."
    )


def with_tools(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """The opening messages with the tools described in the system message (added first
    when there is none)."""
    messages = [dict(m) for m in messages]
    if not tools:
        return messages
    text = tools_prompt(tools)
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{text}"
        return messages
    return [{"role": "system", "content": text}, *messages]


def tool_message(name: str | None, content: str) -> Message:
    """A tool's result, or why the call did not run, as the conversation's next message."""
    return {"role": "tool", "name": name or "tool_call", "content": content}


def result_text(value: Any) -> str:
    """A tool's return value as the model reads it: a string as it is, anything else as
    JSON."""
    return value if isinstance(value, str) else json.dumps(value)
