"""What an episode leaves behind: every turn's tokens, logprobs, tool calls and rewards, and
why it ended. One `EpisodeRecord` is one JSON record of a rollout dataset."""

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from crucible.agents.policy import PolicyVersion
from crucible.agents.protocol import Message


class EndReason(enum.StrEnum):
    """Why an episode ended; every reason but `done` is a truncation."""

    DONE = "done"
    """The environment said so."""

    MAX_TURNS = "max_turns"
    CONTEXT_FULL = "context_full"
    """The conversation left no room for another reply in the model's context."""

    TOOL_FAILED = "tool_failed"
    """A tool timed out, ran out of memory or CPU time, crashed, raised, or could not run
    isolated; the detail names the tool and the outcome."""

    ENVIRONMENT_ERROR = "environment_error"
    """The environment raised, or returned something outside its contract."""

    INVALID_REWARD = "invalid_reward"
    """The environment returned a reward that is not a finite number."""


FAILED_ENDS = frozenset(
    {EndReason.ENVIRONMENT_ERROR, EndReason.INVALID_REWARD, EndReason.TOOL_FAILED}
)
"""Ends that say nothing about the model's reply: such an episode is counted, not trained
on. A truncation by the model's own doing (`max_turns`, `context_full`) is trained on
with the reward it got."""


@dataclass
class ToolCallRecord:
    """One `<tool_call>` of an assistant message."""

    name: str | None
    arguments: dict[str, Any]
    content: str
    """The tool message the model was shown."""

    error: str | None = None
    """Why the call was not run: unparseable, unknown tool, arguments that do not fit."""

    outcome: str | None = None
    """The sandbox's outcome (`sandbox.ToolOutcome`) when it ran: "ok", "timeout", ..."""

    detail: str = ""
    """Why the sandbox's run failed."""

    isolation: str | None = None
    """How its network was cut: "namespace" (the only way a tool runs)."""


@dataclass
class TurnRecord:
    """One assistant message and what followed it."""

    prompt_ids: list[int]
    """The tokens the model was given: the conversation so far, rendered by the chat
    template, and the header of its reply. Empty for a scripted policy."""

    completion_ids: list[int]
    """The tokens it generated, the end-of-turn token included when it wrote one."""

    logprobs: list[float]
    """The log-probability of each of `completion_ids` under the policy that sampled it."""

    finish_reason: str
    """The engine's: "stop" (end of turn or a stop string) or "length" (max tokens)."""

    message: Message
    """The assistant message the completion became (its text, cut at a stop string)."""

    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    observations: list[Message] = field(default_factory=list)
    """The environment's messages after the tool results."""

    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeRecord:
    index: int
    """The episode's place among the tasks of its batch."""

    seed: int
    """The sampling seed of the batch: with the same policy, seed and tasks, the same
    records come back."""

    environment: str
    """The environment's reference, as the spec named it."""

    task: dict[str, Any]
    messages: list[Message]
    """The whole conversation: the opening messages (with the tools described), then each
    turn's assistant message, tool messages and observations."""

    turns: list[TurnRecord]
    reward: float
    """The sum of the turns' rewards."""

    end: EndReason
    end_detail: str = ""
    tool_call_errors: int = 0
    """Calls that were not run: unparseable, unknown tool, arguments that do not fit."""

    policy: PolicyVersion | None = None
    """The weights that sampled it, stamped by online RL (`online_rl/loop.py`); None for a
    scripted policy, or a model outside online RL."""

    @property
    def truncated(self) -> bool:
        """Ended by a limit or a failure rather than by the environment."""
        return self.end is not EndReason.DONE

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["end"] = str(self.end)
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "EpisodeRecord":
        fields = dict(record)
        fields["end"] = EndReason(fields["end"])
        if fields.get("policy") is not None:
            fields["policy"] = PolicyVersion.from_record(fields["policy"])
        fields["turns"] = [
            TurnRecord(**{**t, "tool_calls": [ToolCallRecord(**c) for c in t["tool_calls"]]})
            for t in fields["turns"]
        ]
        return cls(**fields)


def summary(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """What a batch of episodes came to: counts by end reason, tool calls and their errors,
    the mean reward."""
    calls = [c for r in records for t in r.turns for c in t.tool_calls]
    return {
        "episodes": len(records),
        "mean_reward": sum(r.reward for r in records) / len(records) if records else 0.0,
        "ends": dict(sorted(Counter(str(r.end) for r in records).items())),
        "turns": sum(len(r.turns) for r in records),
        "tool_calls": len(calls),
        "tool_call_errors": sum(r.tool_call_errors for r in records),
        "tool_outcomes": dict(sorted(Counter(c.outcome for c in calls if c.outcome).items())),
    }
