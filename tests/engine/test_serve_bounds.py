"""`crucible serve` bounds what one request may cost before it costs anything: the number
of prompts and of completions it starts, stop strings, messages, and body bytes, each a 4xx
naming the bound; and a request without a key is answered 401 with its body unread.

Bytes read are counted at the ASGI boundary (a `receive` that hands out the body chunk by
chunk and counts), and over a real socket the server must answer a request whose body has
not been sent at all.
"""

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Message

from crucible.config.engine import EngineConfig, ServeLimits
from crucible.config.workload import model_preset
from crucible.engine.async_engine import AsyncEngine
from crucible.engine.engine import Engine
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.serving.openai.app import create_engine_app
from tests.servers import app_in_thread

MODEL = "tiny-test"
KEY = "sk-bounds"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = ServeLimits(max_body_bytes=256 * 1024, max_tokens=8)
MIB = 1024 * 1024


def engine_app(limits: ServeLimits = LIMITS) -> FastAPI:
    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    engine = AsyncEngine(Engine(model, ByteTokenizer(), EngineConfig(block_size=4, num_blocks=64)))
    return create_engine_app(
        engine, model_name=MODEL, tokenizer=ByteTokenizer(), api_keys=[KEY], limits=limits
    )


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(engine_app()) as test_client:
        yield test_client


def refusal(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


# -- what a request may ask for ------------------------------------------------------------


def test_5000_prompts_times_n_128_is_refused_at_once_naming_the_bound(
    client: TestClient,
) -> None:
    started = time.monotonic()
    response = client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": ["hello"] * 5000, "n": 128, "max_tokens": 4},
        headers=AUTH,
    )
    error = refusal(response)
    assert time.monotonic() - started < 5
    assert error["param"] == "prompt"
    assert "5000 prompts" in error["message"] and str(LIMITS.max_prompts) in error["message"]
    assert client.get("/health").status_code == 200


def test_prompts_times_n_past_the_bound_is_a_400_naming_it(client: TestClient) -> None:
    response = client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": ["a"] * 10, "n": 128, "max_tokens": 4},
        headers=AUTH,
    )
    error = refusal(response)
    assert error["param"] == "n"
    assert "1280 completions" in error["message"]
    assert str(LIMITS.max_choices) in error["message"]


@pytest.mark.parametrize(
    ("route", "fields", "param", "bound"),
    [
        ("/v1/completions", {"n": 129}, "n", "128"),
        ("/v1/completions", {"max_tokens": 9}, "max_tokens", "8"),
        ("/v1/chat/completions", {"max_completion_tokens": 9}, "max_completion_tokens", "8"),
        ("/v1/completions", {"stop": [f"s{i}" for i in range(17)]}, "stop", "16"),
        ("/v1/chat/completions", {"stop": ["x" * 257]}, "stop", "256"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}] * 1025},
            "messages",
            "1024",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 1025}]},
            "messages",
            "1024",
        ),
    ],
)
def test_each_bound_is_a_400_naming_the_field_and_the_bound(
    client: TestClient, route: str, fields: dict[str, Any], param: str, bound: str
) -> None:
    base: dict[str, Any] = {"model": MODEL, "max_tokens": 4}
    base |= (
        {"prompt": "hi"}
        if route == "/v1/completions"
        else {"messages": [{"role": "user", "content": "hi"}]}
    )
    error = refusal(client.post(route, json=base | fields, headers=AUTH))
    assert error["param"] == param
    assert bound in error["message"]


def test_a_large_logit_bias_is_refused_without_being_echoed(client: TestClient) -> None:
    bias = {str(token): 1.0 for token in range(5000)}
    response = client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "hi", "max_tokens": 4, "logit_bias": bias},
        headers=AUTH,
    )
    error = refusal(response)
    assert error["param"] == "logit_bias"
    assert len(error["message"]) < 300


def test_a_request_within_the_bounds_still_runs(client: TestClient) -> None:
    response = client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 3},
        headers=AUTH,
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 4


# -- bodies: authenticated first, then bounded, before they are read ----------------------


def call_counting(
    app: FastAPI, headers: dict[str, str], body_bytes: int, chunk: int = 64 * 1024
) -> tuple[int, int]:
    """POST /v1/completions to `app` with a body of `body_bytes` sent in chunks, without a
    Content-Length; the status and the body bytes the app took in before it answered."""
    handed = 0
    status = 0
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/completions",
        "raw_path": b"/v1/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            *((k.lower().encode(), v.encode()) for k, v in headers.items()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def receive() -> Message:
        nonlocal handed
        if handed >= body_bytes:
            await asyncio.sleep(3600)  # the client waits for an answer
        size = min(chunk, body_bytes - handed)
        handed += size
        return {"type": "http.request", "body": b" " * size, "more_body": handed < body_bytes}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    return status, handed


def test_an_unauthenticated_50_mib_body_is_refused_unread() -> None:
    status, read = call_counting(engine_app(), {}, 50 * MIB)
    assert status == 401
    assert read == 0


def test_a_chunked_body_past_the_limit_is_a_413_once_it_passes() -> None:
    status, read = call_counting(engine_app(), AUTH, 50 * MIB)
    assert status == 413
    assert read <= LIMITS.max_body_bytes + 64 * 1024


def answer_to_head(url: str, head: str) -> str:
    """Send only a request's head (its body never follows) and read the server's answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            data = sock.recv(4096)
            if not data:
                break
            received += data
    return received.decode("latin-1")


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    with app_in_thread(engine_app()) as url:
        yield url


@pytest.mark.parametrize(
    ("authorization", "status"),
    [("", "401"), (f"Authorization: Bearer {KEY}\r\n", "413")],
)
def test_the_server_answers_a_50_mib_request_before_its_body_is_sent(
    served_url: str, authorization: str, status: str
) -> None:
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{authorization}Content-Length: {50 * MIB}\r\n\r\n"
    )
    answer = answer_to_head(served_url, head)
    assert answer.startswith(f"HTTP/1.1 {status} "), answer
    assert "application/json" in answer
