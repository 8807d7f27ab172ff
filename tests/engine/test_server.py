"""The engine's OpenAI-compatible API, driven by the official `openai` client over a real
uvicorn: completions and chat, streamed and not, seeds, stop strings, logprobs, errors,
metrics, load beyond the KV cache, and clients that go away mid-request.

The tiny GPT has random weights, so its text is arbitrary bytes (much of it not UTF-8):
the tests compare the server with itself (stream against whole, seed against seed) and
with the tokenizer, never with expected words.
"""

import json
import math
import string
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import torch
from fastapi.testclient import TestClient

from crucible.config.engine import EngineConfig
from crucible.config.workload import model_preset
from crucible.engine.async_engine import AsyncEngine
from crucible.engine.engine import Engine
from crucible.models.chat import encode_chat_prompt
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.serving.openai.app import create_engine_app
from tests.servers import app_in_thread

TOK = ByteTokenizer()
MODEL = "tiny-test"
KEY = "sk-test-key"
CONTEXT = model_preset("tiny").max_seq_len
VOCAB = model_preset("tiny").vocab_size
"""The model's embedding rows: ids from here on are not tokens."""
FIXED_LENGTH = {"ignore_eos": True}
"""vLLM's extension: no early EOS, so a completion is exactly max_tokens long."""


@dataclass
class Served:
    url: str
    engine: AsyncEngine

    def client(self, key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60)

    def metric(self, line_start: str) -> float:
        """The value of the first /metrics sample whose line starts with `line_start`."""
        text = httpx.get(f"{self.url}/metrics").text
        for line in text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no sample {line_start!r} in /metrics:\n{text}")


def _serve(config: EngineConfig, *, seconds_per_forward: float = 0.0) -> Iterator[Served]:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model(model_preset("tiny"))
    if seconds_per_forward:
        # A slower model: requests stay in the engine long enough to be seen queued there
        # and to be cut short by a client.
        model.lm_head.register_forward_hook(lambda *_: time.sleep(seconds_per_forward))
    engine = AsyncEngine(Engine(model, TOK, config))
    app = create_engine_app(engine, model_name=MODEL, tokenizer=TOK, api_keys=["other", KEY])
    with app_in_thread(app) as url:
        yield Served(url, engine)
    assert not engine.healthy, "shutting the app down did not stop the engine"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from _serve(EngineConfig(block_size=4, num_blocks=256))


@pytest.fixture(scope="module")
def crowded() -> Iterator[Served]:
    """KV blocks for two requests at a time (16 blocks of 4: 64 positions), and a slow model."""
    yield from _serve(EngineConfig(block_size=4, num_blocks=16), seconds_per_forward=0.005)


def wait_idle(engine: AsyncEngine, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while True:
        stats = engine.stats()
        if stats.running == 0 and stats.waiting == 0 and stats.blocks_used == 0:
            return
        assert time.monotonic() < deadline, f"the engine still holds requests: {stats}"
        time.sleep(0.02)


# -- completions and chat ------------------------------------------------------------------


def test_a_completion_runs_to_max_tokens_and_counts_its_tokens(served: Served) -> None:
    prompt = "12+34="
    response = served.client().completions.create(
        model=MODEL, prompt=prompt, max_tokens=7, seed=1, extra_body=FIXED_LENGTH
    )
    assert response.object == "text_completion"
    assert response.id.startswith("cmpl-")
    assert abs(response.created - time.time()) < 60
    (choice,) = response.choices
    assert choice.index == 0
    assert choice.finish_reason == "length"
    assert isinstance(choice.text, str)
    assert response.usage is not None
    assert response.usage.prompt_tokens == len(TOK.encode(prompt, bos=True))
    assert response.usage.completion_tokens == 7
    assert response.usage.total_tokens == response.usage.prompt_tokens + 7


def test_token_ids_come_back_and_decode_to_the_text(served: Served) -> None:
    prompt = TOK.encode("token ids in", bos=True)
    response = served.client().completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=9,
        seed=3,
        extra_body={"return_token_ids": True, **FIXED_LENGTH},
    )
    (choice,) = response.choices
    extra: dict[str, Any] = choice.model_extra or {}
    assert len(extra["token_ids"]) == 9
    assert extra["prompt_token_ids"] == prompt
    assert TOK.decode(extra["token_ids"]) == choice.text


def test_a_chat_completion_renders_the_messages_with_the_chat_template(served: Served) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is 2+2?"},
    ]
    response = served.client().chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, seed=2, extra_body=FIXED_LENGTH
    )
    assert response.object == "chat.completion"
    (choice,) = response.choices
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert response.usage is not None
    assert response.usage.prompt_tokens == len(encode_chat_prompt(TOK, messages))
    assert response.usage.completion_tokens == 6


def test_n_choices_are_distinct_completions_of_one_prompt(served: Served) -> None:
    response = served.client().completions.create(
        model=MODEL, prompt="n=3:", max_tokens=12, n=3, seed=5, extra_body=FIXED_LENGTH
    )
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert len({c.text for c in response.choices}) == 3
    assert response.usage is not None
    assert response.usage.completion_tokens == 36
    assert response.usage.prompt_tokens == len(TOK.encode("n=3:", bos=True))


def test_the_same_seed_gives_the_same_text_and_another_seed_another(served: Served) -> None:
    client = served.client()

    def text(seed: int) -> str:
        response = client.completions.create(
            model=MODEL, prompt="seeded", max_tokens=16, seed=seed, extra_body=FIXED_LENGTH
        )
        return response.choices[0].text

    first = text(11)
    assert text(11) == first
    assert text(12) != first


def test_logprobs_are_finite_with_their_alternatives(served: Served) -> None:
    client = served.client()
    completion = client.completions.create(
        model=MODEL, prompt="logprobs", max_tokens=8, logprobs=3, seed=4, extra_body=FIXED_LENGTH
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens is not None and len(logprobs.tokens) == 8
    assert logprobs.token_logprobs is not None
    assert all(math.isfinite(lp) and lp <= 0 for lp in logprobs.token_logprobs)
    assert logprobs.top_logprobs is not None
    for top in logprobs.top_logprobs:
        assert 1 <= len(top) <= 4  # three alternatives and the sampled token
        assert all(math.isfinite(lp) and lp <= 0 for lp in top.values())
    assert logprobs.text_offset is not None and logprobs.text_offset[0] == 0

    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        logprobs=True,
        top_logprobs=2,
        seed=4,
        extra_body=FIXED_LENGTH,
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 5
    for token in content:
        assert math.isfinite(token.logprob)
        assert len(token.top_logprobs) == 2
        best = token.top_logprobs[0].logprob
        assert token.logprob <= best + 1e-5
        assert all(math.isfinite(alt.logprob) for alt in token.top_logprobs)


# -- streaming -----------------------------------------------------------------------------


def test_streamed_chunks_join_to_the_whole_completion(served: Served) -> None:
    client = served.client()
    request: dict[str, Any] = {
        "model": MODEL,
        "prompt": "stream me",
        "max_tokens": 30,
        "seed": 21,
        "extra_body": FIXED_LENGTH,
    }
    whole = client.completions.create(**request).choices[0].text
    chunks = list(
        client.completions.create(**request, stream=True, stream_options={"include_usage": True})
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole
    assert len(texts) > 1
    # A byte that may yet complete a character is held back, never sent as U+FFFD.
    assert not any(t.endswith("\ufffd") for t in texts[:-1])
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length"
    assert all(reason is None for reason in finals[:-1])
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    assert usage.completion_tokens == 30


def test_streamed_chat_joins_to_the_whole_reply(served: Served) -> None:
    client = served.client()
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "say something"}],
        "max_tokens": 25,
        "n": 2,
        "seed": 8,
        "extra_body": FIXED_LENGTH,
    }
    whole = client.chat.completions.create(**request)
    joined = ["", ""]
    roles, finals = set(), {}
    for chunk in client.chat.completions.create(**request, stream=True):
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            joined[choice.index] += choice.delta.content or ""
            if choice.delta.role:
                roles.add(choice.index)
            if choice.finish_reason:
                finals[choice.index] = choice.finish_reason
    assert joined == [c.message.content for c in whole.choices]
    assert roles == {0, 1}
    assert finals == {0: "length", 1: "length"}


def test_a_stop_string_cuts_the_text_streamed_or_not(served: Served) -> None:
    client = served.client()
    request: dict[str, Any] = {
        "model": MODEL,
        "prompt": "stop somewhere",
        "max_tokens": 40,
        "seed": 31,
        "extra_body": FIXED_LENGTH,
    }
    full = client.completions.create(**request).choices[0].text
    # A stop string the completion really writes: two plain characters well inside it.
    plain = set(string.ascii_letters + string.digits + string.punctuation + " ")
    start = next(i for i in range(4, len(full) - 1) if {full[i], full[i + 1]} <= plain)
    stop = full[start : start + 2]
    expected = full[: full.index(stop)]

    cut = client.completions.create(**request, stop=[stop, "never-written-stop"]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.text == expected
    streamed = client.completions.create(**request, stop=stop, stream=True)
    chunks = [c.choices[0] for c in streamed]
    assert "".join(c.text for c in chunks) == expected
    assert chunks[-1].finish_reason == "stop"


# -- errors and authentication -------------------------------------------------------------


def test_v1_routes_need_a_known_key_and_probes_do_not(served: Served) -> None:
    response = httpx.get(f"{served.url}/v1/models")
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        served.client(key="sk-wrong").completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert httpx.get(f"{served.url}/health").status_code == 200
    assert httpx.get(f"{served.url}/metrics").status_code == 200


def test_the_app_refuses_to_exist_without_keys(served: Served) -> None:
    with pytest.raises(ValueError, match="api_keys"):
        create_engine_app(served.engine, model_name=MODEL, tokenizer=TOK, api_keys=[])
    with pytest.raises(ValueError, match=r"api_keys\[1\]"):
        create_engine_app(served.engine, model_name=MODEL, tokenizer=TOK, api_keys=["k", " "])


@pytest.mark.parametrize(
    ("request_fields", "param"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"prompt": "x" * 40, "max_tokens": CONTEXT - 20}, "max_tokens"),
        ({"logprobs": 6}, "logprobs"),
        ({"extra_body": {"top_k": -2}}, "top_k"),
        ({"prompt": [VOCAB]}, "prompt"),
        ({"prompt": [TOK.BOS, -1]}, "prompt"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"max_tokens": "many"}, "max_tokens"),
    ],
)
def test_bad_completion_fields_are_a_400_naming_the_field(
    served: Served, request_fields: dict[str, Any], param: str
) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 4, **request_fields}
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().completions.create(**body)
    assert caught.value.status_code == 400
    assert caught.value.param == param
    assert caught.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("request_fields", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
        ({"max_completion_tokens": CONTEXT}, "max_completion_tokens"),
        ({"top_logprobs": 50, "logprobs": True}, "top_logprobs"),
    ],
)
def test_bad_chat_fields_are_a_400_naming_the_field(
    served: Served, request_fields: dict[str, Any], param: str
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **request_fields}
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_id_outside_the_vocabulary_is_refused_and_the_engine_serves_on(
    served: Served, stream: bool
) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=[TOK.BOS, 10**6], max_tokens=4, stream=stream)
    assert caught.value.param == "prompt"
    assert f"token id {10**6} " in caught.value.message
    assert f"vocabulary of {VOCAB} " in caught.value.message
    assert httpx.get(f"{served.url}/health").status_code == 200
    response = client.completions.create(
        model=MODEL, prompt=[TOK.BOS, VOCAB - 1], max_tokens=4, extra_body=FIXED_LENGTH
    )
    assert response.usage is not None and response.usage.completion_tokens == 4


def test_an_unknown_model_is_a_404(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        served.client().completions.create(model="gpt-5", prompt="x", max_tokens=1)
    assert caught.value.param == "model"


def test_models_lists_the_served_model(served: Served) -> None:
    models = served.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert (models.data[0].model_extra or {})["max_model_len"] == CONTEXT


def test_metrics_show_the_engine_after_a_request(served: Served) -> None:
    served.client().completions.create(
        model=MODEL, prompt="metrics", max_tokens=5, extra_body=FIXED_LENGTH
    )
    assert served.metric("crucible_engine_kv_blocks_total ") == 256
    assert served.metric("crucible_engine_waiting_sequences ") == 0
    assert served.metric("crucible_engine_running_sequences ") >= 0
    assert served.metric("crucible_engine_kv_blocks_used ") >= 0
    assert served.metric("crucible_engine_generation_tokens_total ") >= 5
    assert served.metric("crucible_engine_prompt_tokens_total ") >= len("metrics")
    assert served.metric("crucible_engine_preemptions_total ") >= 0
    assert served.metric("crucible_engine_time_to_first_token_seconds_count ") >= 1
    assert served.metric("crucible_engine_inter_token_latency_seconds_count ") >= 4
    assert served.metric("crucible_engine_request_seconds_count ") >= 1
    assert served.metric('crucible_engine_completions_total{finish_reason="length"}') >= 1


# -- load and disconnects ------------------------------------------------------------------


def leave_mid_stream(served: Served, body: dict[str, Any]) -> None:
    """Read the first chunk, then hang up."""
    with httpx.stream(
        "POST",
        f"{served.url}/v1/completions",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        first = next(line for line in response.iter_lines() if line.startswith("data:"))
        assert json.loads(first.removeprefix("data:"))["choices"][0]["finish_reason"] is None


def give_up_waiting(served: Served, body: dict[str, Any]) -> None:
    """Time out before the whole completion comes."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{served.url}/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=httpx.Timeout(10, read=0.1),
        )


@pytest.mark.parametrize("leave", [leave_mid_stream, give_up_waiting])
def test_a_client_that_leaves_aborts_its_request(
    crowded: Served, leave: Callable[[Served, dict[str, Any]], None]
) -> None:
    wait_idle(crowded.engine)
    generated = crowded.engine.stats().counters.generated_tokens
    aborted = crowded.metric('crucible_engine_completions_total{finish_reason="abort"}')
    body = {"model": MODEL, "prompt": "leave early", "max_tokens": 40, "ignore_eos": True}
    leave(crowded, body)
    wait_idle(crowded.engine)
    assert crowded.engine.stats().counters.generated_tokens - generated < 40
    assert crowded.metric('crucible_engine_completions_total{finish_reason="abort"}') > aborted


def test_more_requests_than_kv_blocks_queue_and_all_finish(crowded: Served) -> None:
    wait_idle(crowded.engine)
    client = crowded.client()
    most_waiting = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal most_waiting
        while not done.is_set():
            most_waiting = max(most_waiting, crowded.engine.stats().waiting)
            time.sleep(0.002)

    def ask(i: int) -> tuple[str | None, int]:
        response = client.completions.create(
            model=MODEL, prompt=f"question {i:02d}", max_tokens=16, seed=i, extra_body=FIXED_LENGTH
        )
        assert response.usage is not None
        return response.choices[0].finish_reason, response.usage.completion_tokens

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(ask, range(16)))
    finally:
        done.set()
        watcher.join(5)
    assert results == [("length", 16)] * 16
    assert most_waiting > 0
    wait_idle(crowded.engine)


def test_the_app_runs_the_engine_and_refuses_requests_once_it_stopped() -> None:
    engine = AsyncEngine(
        Engine(build_model(model_preset("tiny")), TOK, EngineConfig(block_size=4, num_blocks=16))
    )
    app = create_engine_app(engine, model_name=MODEL, tokenizer=TOK, api_keys=[KEY])
    assert not engine.healthy
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        engine.stop()  # as when its thread fails
        assert client.get("/health").status_code == 503
        response = client.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": "anyone?", "max_tokens": 2},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"
