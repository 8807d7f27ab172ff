"""Tool calls as the model writes them: read in order, each malformed one a reason of its
own; arguments checked against the tool's parameters before anything runs."""

import pytest

from crucible.agents.protocol import ToolSpec
from crucible.agents.tool_calls import (
    CallError,
    ToolCall,
    call_problem,
    parse_tool_calls,
    tool_message,
    with_tools,
)

CALCULATE = ToolSpec(
    "calculate",
    "arithmetic",
    {
        "type": "object",
        "properties": {"expression": {"type": "string"}, "digits": {"type": "integer"}},
        "required": ["expression"],
    },
    "crucible.agents.envs.calculator:calculate",
)
TOOLS = {"calculate": CALCULATE}


def test_calls_are_read_in_order_among_other_text() -> None:
    text = (
        'First <tool_call>{"name": "calculate", "arguments": {"expression": "1+2"}}</tool_call>'
        ' then <tool_call>\n{"name": "calculate", "arguments": {"expression": "3*4"}}\n'
        "</tool_call> done."
    )
    assert parse_tool_calls(text) == [
        ToolCall("calculate", {"expression": "1+2"}),
        ToolCall("calculate", {"expression": "3*4"}),
    ]
    assert parse_tool_calls("no calls here") == []


@pytest.mark.parametrize(
    ("inside", "problem"),
    [
        ("{'name': 'calculate'}</tool_call>", "not JSON"),
        ('{"name": "calculate"', "not closed"),
        ('["calculate"]</tool_call>', "JSON list, not an object"),
        ('{"arguments": {}}</tool_call>', 'no "name"'),
        ('{"name": "calculate", "arguments": "1+2"}</tool_call>', "are not a JSON object"),
    ],
)
def test_a_malformed_call_is_an_error_saying_what_is_wrong(inside: str, problem: str) -> None:
    (found,) = parse_tool_calls(f"<tool_call>{inside}")
    assert isinstance(found, CallError)
    assert problem in found.problem


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (ToolCall("calc", {}), "no tool named 'calc' (tools: calculate)"),
        (ToolCall("calculate", {}), "needs the argument 'expression'"),
        (ToolCall("calculate", {"expression": "1", "base": 2}), "no argument 'base'"),
        (ToolCall("calculate", {"expression": 12}), "must be of type string, got 12"),
        (ToolCall("calculate", {"expression": "1", "digits": True}), "type integer, got True"),
    ],
)
def test_a_call_that_does_not_fit_its_tool_is_refused(call: ToolCall, problem: str) -> None:
    assert problem in (call_problem(call, TOOLS) or "")


def test_a_call_that_fits_is_not_refused() -> None:
    assert call_problem(ToolCall("calculate", {"expression": "1", "digits": 3}), TOOLS) is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "two words"}, "'two words'"),
        ({"function": lambda: 1}, "<lambda>"),
        ({"function": "no_colon"}, "'no_colon'"),
        ({"parameters": {"type": "array"}}, "'array'"),
    ],
)
def test_a_bad_tool_spec_names_the_bad_value(fields: dict[str, object], named: str) -> None:
    spec = {"name": "t", "description": "", "parameters": {}, "function": "m:f", **fields}
    with pytest.raises(ValueError, match="tool") as raised:
        ToolSpec(**spec)  # type: ignore[arg-type]
    assert named in str(raised.value)


def test_a_module_level_function_is_sent_by_its_import_path() -> None:
    assert ToolSpec("t", "", {}, tool_message).target == "crucible.agents.tool_calls:tool_message"


def test_the_tools_are_described_in_the_system_message() -> None:
    user = {"role": "user", "content": "What is 2+2?"}
    (system, asked) = with_tools([user], [CALCULATE])
    assert system["role"] == "system" and '"name": "calculate"' in system["content"]
    assert asked == user
    (merged, _) = with_tools([{"role": "system", "content": "Be brief."}, user], [CALCULATE])
    assert merged["content"].startswith("Be brief.\n\n") and "<tools>" in merged["content"]
    assert with_tools([user], []) == [user]
