"""A hand-written fuzz of `crucible serve`'s OpenAI routes, over a real uvicorn serving the
tiny CPU model: hostile bodies for /v1/completions and /v1/chat/completions (wrong types,
huge and non-finite numbers, out-of-vocabulary token ids, long and control-character text,
bodies that are not JSON, missing or wrong keys). No 5xx, and no request held for seconds.

The sizes that are within the server's limits stay small (a few prompts, a few choices):
the tiny model's 64-token context bounds each completion, so a case that the server rightly
accepts still ends in well under a second; the sizes past the limits are there to be refused.
"""

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from crucible.config.engine import EngineConfig
from crucible.config.workload import model_preset
from crucible.engine.async_engine import AsyncEngine
from crucible.engine.engine import Engine
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.serving.openai.app import create_engine_app
from tests.fuzz_tenancy import SLOW_SECONDS
from tests.servers import app_in_thread

MODEL = "tiny-test"
KEY = "sk-fuzz-key"
EXAMPLES = 100
"""Cases per route: each is one request to the engine."""

NASTY_NUMBERS: list[Any] = [
    -1,
    0,
    2**31,
    2**63,
    2**70,
    10**400,
    1e20,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "inf",
    "NaN",
    "1e400",
]
NASTY_TEXT = [
    "",
    "\x00",
    "\x1b[2J\x1b[31m",
    "\ud7ff\ue000",
    "é☃𝄞",
    "x" * 5_000,
    "<|endoftext|>",
    "\r\n" * 50,
]
wrong_type = st.one_of(
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
hostile_number = st.one_of(st.integers(), st.floats(), st.sampled_from(NASTY_NUMBERS))
hostile_text = st.one_of(st.text(max_size=40), st.sampled_from(NASTY_TEXT))
hostile = st.one_of(hostile_number, hostile_text, wrong_type)
short_text = st.text(max_size=20)
token_ids = st.lists(st.integers(0, 255), min_size=1, max_size=20)
bad_token_ids = st.lists(st.sampled_from([-1, 264, 10**6, 2**63]), min_size=1, max_size=3)

# A valid request, then up to two fields swapped for hostile values: most cases are then
# wrong in one or two ways, as a real client's mistakes are, and some are served in full.
sampling = {
    "max_tokens": st.integers(1, 64),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "top_k": st.integers(-1, 50),
    "n": st.integers(1, 4),
    "seed": st.integers(0, 2**31),
    "stop": st.one_of(short_text, st.lists(short_text, max_size=4)),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "ignore_eos": st.booleans(),
    "return_token_ids": st.booleans(),
}
COMPLETION_FIELDS = [*sampling, "prompt", "logprobs", "echo", "best_of", "suffix", "logit_bias"]
CHAT_FIELDS = [*sampling, "messages", "max_completion_tokens", "top_logprobs", "tools"]
valid_completion = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "prompt": st.one_of(short_text, st.lists(short_text, min_size=1, max_size=4), token_ids),
    },
    optional={**sampling, "logprobs": st.integers(0, 5)},
)
valid_chat = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["system", "user", "assistant"]),
                    "content": st.one_of(
                        short_text,
                        st.lists(
                            st.fixed_dictionaries({"type": st.just("text"), "text": short_text}),
                            max_size=3,
                        ),
                    ),
                }
            ),
            min_size=1,
            max_size=4,
        ),
    },
    optional={**sampling, "logprobs": st.booleans(), "top_logprobs": st.integers(0, 5)},
)
hostile_prompt = st.one_of(
    st.just(["a"] * 300),  # more prompts than the server takes in one request
    bad_token_ids,
    st.lists(token_ids, max_size=3),
    st.lists(hostile_text, max_size=4),
)
hostile_messages = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.one_of(st.just("tool"), hostile_text),
                "content": st.one_of(hostile_text, st.lists(hostile, max_size=3)),
            }
        ),
        max_size=3,
    ),
    st.just([{"role": "user", "content": "hi"}] * 2_000),  # more than the server takes
    st.just([]),
)


def spoiled(fields: list[str], extra: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Up to two of `fields` (and unknown ones) with hostile values."""
    names = st.sampled_from([*fields, "model", "unknown_field"])
    plain = st.dictionaries(names, hostile, max_size=2)
    return st.tuples(plain, st.fixed_dictionaries({}, optional=extra)).map(
        lambda parts: {**parts[0], **parts[1]}
    )


completion = st.tuples(
    valid_completion,
    spoiled(COMPLETION_FIELDS, {"prompt": hostile_prompt, "n": st.sampled_from([129, 10**6])}),
).map(lambda parts: {**parts[0], **parts[1]})
chat = st.tuples(
    valid_chat,
    spoiled(CHAT_FIELDS, {"messages": hostile_messages, "n": st.sampled_from([129, 10**6])}),
).map(lambda parts: {**parts[0], **parts[1]})
GOOD = {"Authorization": f"Bearer {KEY}"}
headers = st.one_of(
    st.just(GOOD),
    st.just(GOOD),
    st.just(GOOD),
    st.just({}),
    st.just({"Authorization": "Bearer sk-wrong"}),
    st.just({"Authorization": "Bearer " + "k" * 10_000}),
    st.just({"Authorization": "Basic \x7f"}),
)


def encoded(body: Any) -> st.SearchStrategy[bytes]:
    """The body as JSON (NaN and Infinity bare, as Python writes them), or broken JSON."""
    whole = json.dumps(body).encode()
    return st.one_of(
        st.just(whole),
        st.just(whole),
        st.just(whole[: len(whole) // 2]),
        st.just(b"[" * 100_000),  # nesting deeper than any parser should follow
        st.just(b"\xff\xfe"),
        st.just(b" " * (9 << 20)),  # past the default 8 MiB body limit, to be refused unread
    )


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(model_preset("tiny"))
    engine = AsyncEngine(Engine(model, ByteTokenizer(), EngineConfig(block_size=4, num_blocks=256)))
    app = create_engine_app(engine, model_name=MODEL, tokenizer=ByteTokenizer(), api_keys=[KEY])
    with app_in_thread(app) as url:
        yield url


def fuzz(url: str, bodies: st.SearchStrategy[Any]) -> None:
    with httpx.Client(timeout=30) as client:

        @given(body=bodies.flatmap(encoded), sent=headers)
        @settings(
            max_examples=EXAMPLES,
            # No shrinking: a failure is reported as generated, so that a failing run
            # still ends in bounded time.
            phases=[Phase.generate],
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def call(body: bytes, sent: dict[str, str]) -> None:
            started = time.monotonic()
            response = client.post(
                url, content=body, headers={**sent, "Content-Type": "application/json"}
            )
            seconds = time.monotonic() - started
            where = f"{body[:300]!r} ({len(body)} bytes, {sorted(sent)})"
            assert response.status_code < 500, (
                f"{where} answered {response.status_code}: {response.text[:300]}"
            )
            assert seconds < SLOW_SECONDS, f"{where} took {seconds:.1f} s"

        call()


@pytest.mark.slow
def test_completions_never_fail_or_stall(served: str) -> None:
    fuzz(f"{served}/v1/completions", completion)


@pytest.mark.slow
def test_chat_completions_never_fail_or_stall(served: str) -> None:
    fuzz(f"{served}/v1/chat/completions", chat)
