"""An episode under bad input: an environment that raises or breaks its contract, a reward
that is NaN, a malformed tool call, a tool that fails in the sandbox. Each is counted with
its reason in the record, and ends that episode only (or, for a malformed call, not even
that); the records survive JSON."""

import json
import math

import pytest

from crucible.agents.loading import load_environment
from crucible.agents.records import EndReason, EpisodeRecord, summary
from crucible.agents.runner import run_scripted
from crucible.agents.sandbox import Sandbox, SandboxLimits
from crucible.config.online_rl import EpisodeConfig
from tests.agents import policies

CONFIG = EpisodeConfig(max_turns=4)
BROKEN = "tests.agents.broken_envs"


def play(
    reference: str, policy: object = None, count: int = 2, **options: object
) -> list[EpisodeRecord]:
    source = load_environment(reference, options)
    return run_scripted(
        policy or (lambda messages: "ok"),  # type: ignore[arg-type]
        source,
        source.tasks(count, seed=0),
        seed=0,
        config=CONFIG,
        sandbox=Sandbox(SandboxLimits(wall_seconds=2, memory_bytes=256 * 2**20)),
    )


@pytest.mark.parametrize(
    ("environment", "end", "detail"),
    [
        (
            "RaisesInReset",
            EndReason.ENVIRONMENT_ERROR,
            "reset() or tools() raised RuntimeError: no such task 0",
        ),
        ("RaisesInStep", EndReason.ENVIRONMENT_ERROR, "step() raised KeyError: 'score'"),
        ("NanReward", EndReason.INVALID_REWARD, "step() returned reward nan"),
        ("ReturnsADict", EndReason.ENVIRONMENT_ERROR, "step() returned a dict, not a Turn"),
        ("AssistantInReset", EndReason.ENVIRONMENT_ERROR, "reset() message 1 has role 'assistant'"),
    ],
)
def test_an_environment_that_breaks_its_contract_ends_its_episodes_with_the_reason(
    environment: str, end: EndReason, detail: str
) -> None:
    records = play(f"{BROKEN}:{environment}")
    assert [r.end for r in records] == [end, end]
    assert records[0].end_detail.startswith(detail), records[0].end_detail
    assert all(math.isfinite(r.reward) and r.reward == 0.0 for r in records)
    assert summary(records)["ends"] == {str(end): 2}


def test_a_malformed_tool_call_is_answered_and_counted_and_the_episode_goes_on() -> None:
    def clumsy(messages: list[dict[str, str]]) -> str:
        if len(messages) == 2:  # first turn: two broken calls, an unknown tool, a good one
            good = policies.calculator(messages)
            return (
                "<tool_call>{calculate: 1+1}</tool_call>"
                '<tool_call>{"name": "calculator", "arguments": {}}</tool_call>'
                f"{good}<tool_call>"
            )
        return policies.calculator(messages)

    (record,) = play("calculator", clumsy, count=1)
    assert (record.end, record.reward, record.tool_call_errors) == (EndReason.DONE, 1.0, 3)
    calls = record.turns[0].tool_calls
    assert [c.outcome for c in calls] == [None, None, "ok", None]
    assert "could not be read: the call is not JSON" in calls[0].content
    assert calls[1].content == "error: there is no tool named 'calculator' (tools: calculate)"
    assert "not closed" in (calls[3].error or "")
    tool_messages = [m for m in record.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [c.content for c in calls]
    assert summary([record])["tool_call_errors"] == 3


def test_too_many_calls_in_one_message_are_refused_beyond_the_limit() -> None:
    def eager(messages: list[dict[str, str]]) -> str:
        if messages[-1]["role"] == "tool":
            return policies.calculator(messages)
        return policies.calculator(messages) * 6

    (record,) = play("calculator", eager, count=1)
    outcomes = [c.outcome for c in record.turns[0].tool_calls]
    assert outcomes == ["ok"] * CONFIG.max_tool_calls_per_turn + [None, None]
    assert record.tool_call_errors == 2 and record.reward == 1.0


CALLS = [
    {"name": "echo", "arguments": {"text": "fine"}},
    {"name": "sleep", "arguments": {"seconds": 30}},
    {"name": "allocate", "arguments": {"megabytes": 1024}},
    {"name": "segfault", "arguments": {}},
    {"name": "fail", "arguments": {"message": "tool bug"}},
]


def call_the_task_tool(messages: list[dict[str, str]]) -> str:
    """Call the tool the user message names, with the arguments of that task."""
    if messages[-1]["role"] == "tool":
        return "done"
    name = messages[-1]["content"].removeprefix("Call ").rstrip(".")
    (arguments,) = [c["arguments"] for c in CALLS if c["name"] == name]
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_a_tool_that_fails_ends_that_episode_only_with_the_reason() -> None:
    records = play(f"{BROKEN}:OneTool", call_the_task_tool, count=6, calls=CALLS)
    assert [r.end for r in records] == [
        EndReason.DONE,
        EndReason.TOOL_FAILED,
        EndReason.TOOL_FAILED,
        EndReason.TOOL_FAILED,
        EndReason.TOOL_FAILED,
        EndReason.DONE,
    ]
    details = [r.end_detail for r in records[1:5]]
    assert details[0] == "tool sleep: timeout: still running after 2 s"
    assert details[1].startswith("tool allocate: memory: MemoryError past its 268435456 bytes")
    assert details[2].startswith("tool segfault: crashed: ended with signal SIGSEGV")
    assert details[3].startswith("tool fail: error: ValueError: tool bug")
    assert [r.reward for r in records] == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert summary(records)["tool_outcomes"] == {
        "crashed": 1,
        "error": 1,
        "memory": 1,
        "ok": 2,
        "timeout": 1,
    }


def test_records_survive_json() -> None:
    records = play("calculator", policies.calculator, count=3)
    records += play(f"{BROKEN}:NanReward")
    for record in records:
        text = json.dumps(record.to_record())
        assert EpisodeRecord.from_record(json.loads(text)) == record
