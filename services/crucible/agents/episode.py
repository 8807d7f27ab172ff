"""One episode, turn by turn, whoever writes the assistant's messages.

The runner hands an `Episode` each reply (`take_reply`), runs the tool calls it
returns through the sandbox, and hands back their runs (`take_tool_runs`); the episode
keeps the conversation, calls the environment, and records everything. Whatever the
environment or a tool does wrong ends this episode with a reason; nothing here raises for
it.
"""

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crucible.agents.loading import EnvironmentSource
from crucible.agents.protocol import AgentEnvironment, Message, ToolResult, ToolSpec, Turn
from crucible.agents.records import EndReason, EpisodeRecord, ToolCallRecord, TurnRecord
from crucible.agents.sandbox import ToolRun
from crucible.agents.tool_calls import (
    CallError,
    call_problem,
    parse_tool_calls,
    result_text,
    tool_message,
    with_tools,
)


@dataclass(frozen=True)
class Reply:
    """One assistant reply as the policy produced it."""

    text: str
    prompt_ids: Sequence[int] = ()
    completion_ids: Sequence[int] = ()
    logprobs: Sequence[float] = ()
    finish_reason: str = "stop"


@dataclass(frozen=True)
class PendingCall:
    """A well-formed tool call waiting for the sandbox: what to run."""

    target: str
    arguments: dict[str, Any]


class Episode:
    def __init__(
        self,
        *,
        index: int,
        task: Mapping[str, Any],
        source: EnvironmentSource,
        seed: int,
        max_turns: int,
        max_tool_calls: int,
    ) -> None:
        self.index = index
        self.task = dict(task)
        self.source = source
        self.seed = seed
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self.messages: list[Message] = []
        self.turns: list[TurnRecord] = []
        self.end: EndReason | None = None
        self.end_detail = ""
        self.tool_call_errors = 0
        self._environment: AgentEnvironment | None = None
        self._tools: dict[str, ToolSpec] = {}
        self._pending: list[ToolCallRecord] = []

    @property
    def ended(self) -> bool:
        return self.end is not None

    def open(self) -> None:
        """Build the environment and reset it on the task: the opening messages, with the
        tools described in the system message."""
        try:
            environment = self.source.new()
            opening = environment.reset(self.task)
            tools = list(environment.tools())
        except Exception as exc:
            self.stop(EndReason.ENVIRONMENT_ERROR, _raised("reset() or tools()", exc))
            return
        problem = _messages_problem(opening, "reset()") or _tools_problem(tools)
        if problem is None and not opening:
            problem = "reset() returned no messages"
        if problem is not None:
            self.stop(EndReason.ENVIRONMENT_ERROR, problem)
            return
        self._environment = environment
        self._tools = {t.name: t for t in tools}
        self.messages = with_tools(opening, tools)

    def take_reply(self, reply: Reply) -> list[PendingCall]:
        """Record the reply; the tool calls in it that are fit to run, in order. A call
        that is not (unparseable, unknown, bad arguments, one too many) gets a tool
        message saying why, and the episode goes on."""
        message: Message = {"role": "assistant", "content": reply.text}
        self.messages.append(message)
        self.turns.append(
            TurnRecord(
                prompt_ids=list(reply.prompt_ids),
                completion_ids=list(reply.completion_ids),
                logprobs=list(reply.logprobs),
                finish_reason=reply.finish_reason,
                message=message,
            )
        )
        self._pending = []
        runnable: list[PendingCall] = []
        for number, found in enumerate(parse_tool_calls(reply.text), start=1):
            if isinstance(found, CallError):
                self._refuse(None, {}, f"tool call {number} could not be read: {found.problem}")
                continue
            problem = call_problem(found, self._tools)
            if problem is None and len(runnable) >= self.max_tool_calls:
                problem = f"at most {self.max_tool_calls} tool calls are run per message"
            if problem is not None:
                self._refuse(found.name, found.arguments, problem)
                continue
            self._pending.append(ToolCallRecord(found.name, found.arguments, content=""))
            runnable.append(PendingCall(self._tools[found.name].target, found.arguments))
        return runnable

    def take_tool_runs(self, runs: Sequence[ToolRun]) -> None:
        """The sandbox's runs of the calls `take_reply` returned, in their order: the
        tool messages, then the environment's turn. A run that failed ends the episode."""
        turn = self.turns[-1]
        ran = iter(runs)
        for record in self._pending:
            if record.error is None:
                run = next(ran)
                record.outcome, record.detail = str(run.outcome), run.detail
                record.isolation = run.isolation
                record.content = result_text(run.value) if run.ok else f"error: {run.outcome}"
        turn.tool_calls = self._pending
        self.messages += [tool_message(r.name, r.content) for r in self._pending]
        failed = next((r for r in self._pending if r.outcome not in (None, "ok")), None)
        if failed is not None:
            self.stop(
                EndReason.TOOL_FAILED, f"tool {failed.name}: {failed.outcome}: {failed.detail}"
            )
            return
        results = [ToolResult(r.name, r.arguments, r.content, r.error) for r in self._pending]
        self._environment_turn(turn, results)

    def _refuse(self, name: str | None, arguments: dict[str, Any], problem: str) -> None:
        self.tool_call_errors += 1
        self._pending.append(
            ToolCallRecord(name, arguments, content=f"error: {problem}", error=problem)
        )

    def _environment_turn(self, turn: TurnRecord, results: list[ToolResult]) -> None:
        assert self._environment is not None
        try:
            # A copy: an environment that edits the message must not edit the record.
            answer = self._environment.step(dict(turn.message), results)
        except Exception as exc:
            self.stop(EndReason.ENVIRONMENT_ERROR, _raised("step()", exc))
            return
        problem = _turn_problem(answer)
        if problem is not None:
            self.stop(*problem)
            return
        turn.reward = float(answer.reward)
        turn.observations = [dict(m) for m in answer.observations]
        turn.info = json.loads(json.dumps(dict(answer.info)))
        self.messages += turn.observations
        if answer.done:
            self.stop(EndReason.DONE)
        elif len(self.turns) >= self.max_turns:
            self.stop(EndReason.MAX_TURNS, f"{self.max_turns} turns")

    def stop(self, reason: EndReason, detail: str = "") -> None:
        self.end, self.end_detail = reason, detail

    def record(self) -> EpisodeRecord:
        assert self.end is not None, "an episode is recorded once it has ended"
        return EpisodeRecord(
            index=self.index,
            seed=self.seed,
            environment=self.source.reference,
            task=self.task,
            messages=self.messages,
            turns=self.turns,
            reward=sum(t.reward for t in self.turns),
            end=self.end,
            end_detail=self.end_detail,
            tool_call_errors=self.tool_call_errors,
        )


def _raised(where: str, exc: Exception) -> str:
    return f"{where} raised {type(exc).__name__}: {exc}"


def _turn_problem(answer: Any) -> tuple[EndReason, str] | None:
    """Why `step()`'s answer breaks the contract, or None."""
    if not isinstance(answer, Turn):
        return EndReason.ENVIRONMENT_ERROR, f"step() returned a {type(answer).__name__}, not a Turn"
    reward = answer.reward
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        return EndReason.INVALID_REWARD, f"step() returned reward {reward!r}, not a number"
    if not math.isfinite(reward):
        return EndReason.INVALID_REWARD, f"step() returned reward {reward}"
    problem = _messages_problem(answer.observations, "step()")
    if problem is not None:
        return EndReason.ENVIRONMENT_ERROR, problem
    try:
        # The info is stored in the record: it must survive JSON as it is.
        json.dumps(dict(answer.info))
    except (TypeError, ValueError) as exc:
        return EndReason.ENVIRONMENT_ERROR, f"step() returned an info that is not JSON: {exc}"
    return None


def _messages_problem(messages: Any, where: str) -> str | None:
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        return f"{where} returned a {type(messages).__name__}, not a list of messages"
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, Mapping):
            return f"{where} message {number} is a {type(message).__name__}, not a mapping"
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or role == "assistant" or not role:
            return f"{where} message {number} has role {role!r}; the assistant's are the model's"
        if not isinstance(content, str):
            return f"{where} message {number} has content {content!r}, not a string"
    return None


def _tools_problem(tools: list[Any]) -> str | None:
    for tool in tools:
        if not isinstance(tool, ToolSpec):
            return f"tools() returned a {type(tool).__name__}, not a ToolSpec"
    names = [t.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    return f"tools() names {duplicate!r} twice" if duplicate else None
