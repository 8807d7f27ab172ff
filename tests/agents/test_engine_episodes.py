"""Episodes through the serving engine: the tiny random GPT for the plumbing (every turn's
prompt, tokens and logprobs recorded, the same records for a seed whatever the
concurrency, a context that fills up), and an engine double that writes a scripted
policy's replies, finishing requests in a shuffled order, for the tool calls a random
model never writes."""

import json
import random
import re
from dataclasses import dataclass, field

import pytest
import torch

from crucible.agents.loading import load_environment
from crucible.agents.records import EndReason, EpisodeRecord, summary
from crucible.agents.runner import run_episodes
from crucible.agents.sandbox import Sandbox, SandboxLimits
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.engine.engine import Engine
from crucible.models.chat import encode_chat_prompt
from crucible.models.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
CONFIG = EpisodeConfig(max_turns=3, max_tokens_per_turn=24)


def engine(model: torch.nn.Module, rows: int) -> Engine:
    return Engine(model, TOK, EngineConfig(block_size=16, num_blocks=512, max_running=rows))


def play(
    model: torch.nn.Module, *, seed: int, concurrency: int, config: EpisodeConfig = CONFIG
) -> tuple[list[EpisodeRecord], Engine]:
    source = load_environment("calculator", {"digits": 4})
    served = engine(model, concurrency)
    records = run_episodes(
        served,
        source,
        source.tasks(6, seed=0),
        seed=seed,
        config=EpisodeConfig(**{**config.__dict__, "concurrency": concurrency}),
        sandbox=Sandbox(),
    )
    return records, served


def test_every_turn_is_recorded_with_its_prompt_tokens_and_logprobs(
    chat_model: torch.nn.Module,
) -> None:
    records, served = play(chat_model, seed=0, concurrency=6)
    assert [r.index for r in records] == list(range(6))
    submitted = 0
    for record in records:
        assert (record.end, len(record.turns)) == (EndReason.MAX_TURNS, CONFIG.max_turns)
        replies = [i for i, m in enumerate(record.messages) if m["role"] == "assistant"]
        for turn, at in zip(record.turns, replies, strict=True):
            assert turn.prompt_ids == encode_chat_prompt(TOK, record.messages[:at])
            assert record.messages[at] == turn.message
            assert 0 < len(turn.completion_ids) <= CONFIG.max_tokens_per_turn
            assert len(turn.logprobs) == len(turn.completion_ids)
            assert all(math_ok(lp) for lp in turn.logprobs)
            assert turn.finish_reason in ("stop", "length")
            submitted += len(turn.prompt_ids)
        errors = sum(c.error is not None for t in record.turns for c in t.tool_calls)
        assert record.tool_call_errors == errors
    assert summary(records)["turns"] == 6 * CONFIG.max_turns
    # The turns share their history (and the episodes their system message) in cached blocks.
    assert served.counters.prompt_tokens < submitted / 3
    json.dumps([r.to_record() for r in records])


def math_ok(logprob: float) -> bool:
    return logprob <= 0.0 and logprob > float("-inf")


def test_a_seed_gives_the_same_records_whatever_the_concurrency(
    chat_model: torch.nn.Module,
) -> None:
    together, _ = play(chat_model, seed=7, concurrency=6)
    two_at_a_time, _ = play(chat_model, seed=7, concurrency=2)
    # The same tokens and messages; the logprobs to float rounding, as a batch of another
    # size sums its matmuls in another order.
    assert [without_logprobs(r) for r in together] == [without_logprobs(r) for r in two_at_a_time]
    for one, other in zip(together, two_at_a_time, strict=True):
        for turn, again in zip(one.turns, other.turns, strict=True):
            assert turn.logprobs == pytest.approx(again.logprobs, abs=1e-4)
    other, _ = play(chat_model, seed=8, concurrency=6)
    assert [r.turns[0].completion_ids for r in other] != [
        r.turns[0].completion_ids for r in together
    ]


def without_logprobs(record: EpisodeRecord) -> dict[str, object]:
    fields = record.to_record()
    for turn in fields["turns"]:
        turn.pop("logprobs")
    return fields


def test_a_conversation_that_fills_the_context_is_truncated(chat_model: torch.nn.Module) -> None:
    config = EpisodeConfig(max_turns=50, max_tokens_per_turn=200)
    records, served = play(chat_model, seed=0, concurrency=2, config=config)
    for record in records:
        assert record.end is EndReason.CONTEXT_FULL, record.end
        assert f"at most {served.max_sequence_tokens}" in record.end_detail
        last = record.turns[-1]
        assert len(last.prompt_ids) + len(last.completion_ids) <= served.max_sequence_tokens


# -- an engine double: a scripted policy's replies, finished in a shuffled order ----------


@dataclass
class _Sequence:
    request_id: str


@dataclass
class _Progress:
    seq: _Sequence
    finished: bool = True


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    text: str
    tokens: list[int]
    logprobs: list[_Logprob]
    finish_reason: str = "stop"


@dataclass
class _Output:
    completions: list[_Completion]


@dataclass
class ScriptedEngine:
    """What the runner asks of an engine, answered by `reply(prompt text)`; each step
    finishes one waiting request, chosen by `order_seed`."""

    order_seed: int
    tokenizer: ByteTokenizer = field(default_factory=ByteTokenizer)
    max_sequence_tokens: int = 10_000
    waiting: dict[str, list[int]] = field(default_factory=dict)
    done: dict[str, _Output] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.order_seed)

    def add_request(self, prompt: list[int], params: object, request_id: str) -> str:
        self.waiting[request_id] = prompt
        return request_id

    @property
    def has_work(self) -> bool:
        return bool(self.waiting)

    def step(self) -> list[_Progress]:
        request_id = self.rng.choice(sorted(self.waiting))
        text = reply(self.tokenizer.decode(self.waiting.pop(request_id)))
        tokens = self.tokenizer.encode(text, eos=True)
        self.done[request_id] = _Output([_Completion(text, tokens, [_Logprob(-1.0)] * len(tokens))])
        return [_Progress(_Sequence(request_id))]

    def release(self, request_id: str) -> _Output:
        return self.done.pop(request_id)

    def abort(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)


def reply(prompt: str) -> str:
    """The calculator's solution, or the call a OneTool task names, read off the prompt
    (the default template's text: `<|role|>\ncontent` per message, the reply's header last)."""
    role, content = re.findall(r"<\|(\w+)\|>\n([^\n]*)", prompt)[-2]
    if role == "tool":
        return f"Answer: {content}"
    question = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", content)
    if question:
        call = {"name": "calculate", "arguments": {"expression": " ".join(question.groups())}}
    else:
        name = content.removeprefix("Call ").rstrip(".")
        call = {"name": name, "arguments": {"sleep": {"seconds": 30}, "echo": {"text": "x"}}[name]}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


@pytest.mark.parametrize(("concurrency", "order_seed"), [(1, 0), (8, 1), (8, 2)])
def test_tools_run_beside_generation_and_the_records_do_not_depend_on_the_order(
    concurrency: int, order_seed: int
) -> None:
    source = load_environment("calculator", {"digits": 6})
    tasks = source.tasks(8, seed=0)
    records = run_episodes(
        ScriptedEngine(order_seed),  # type: ignore[arg-type]
        source,
        tasks,
        seed=0,
        config=EpisodeConfig(max_turns=3, concurrency=concurrency, tool_workers=3),
        sandbox=Sandbox(),
    )
    assert [(r.end, r.reward) for r in records] == [(EndReason.DONE, 1.0)] * 8
    assert [r.task for r in records] == tasks
    assert [len(r.turns[0].logprobs) for r in records] == [
        len(r.turns[0].completion_ids) for r in records
    ]
    assert len({json.dumps([r.to_record() for r in records])}) == 1
    if concurrency == 8:
        baseline = run_episodes(
            ScriptedEngine(99),  # type: ignore[arg-type]
            source,
            tasks,
            seed=0,
            config=EpisodeConfig(max_turns=3, concurrency=1),
            sandbox=Sandbox(),
        )
        assert [r.to_record() for r in records] == [r.to_record() for r in baseline]


def test_a_hanging_tool_ends_its_episode_while_the_others_finish() -> None:
    calls = [
        {"name": "echo", "arguments": {"text": "fine"}},
        {"name": "sleep", "arguments": {"seconds": 30}},
    ]
    source = load_environment("tests.agents.broken_envs:OneTool", {"calls": calls})
    records = run_episodes(
        ScriptedEngine(0),  # type: ignore[arg-type]
        source,
        source.tasks(6, seed=0),
        seed=0,
        config=EpisodeConfig(max_turns=3, concurrency=6, tool_workers=6),
        sandbox=Sandbox(SandboxLimits(wall_seconds=1)),
    )
    assert [r.end for r in records] == [EndReason.DONE, EndReason.TOOL_FAILED] * 3
    assert all(
        r.end_detail == "tool sleep: timeout: still running after 1 s" for r in records[1::2]
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"max_turns": 0}, "max_turns must be a positive integer, got 0"),
        ({"concurrency": 2.5}, "concurrency must be a positive integer, got 2.5"),
        ({"temperature": -1.0}, "temperature: must be between 0 and 100, got -1.0"),
        ({"stop": ("",)}, "stop: stop strings must not be empty"),
    ],
)
def test_a_bad_episode_config_names_the_value(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        EpisodeConfig(**change)  # type: ignore[arg-type]
