"""The SDK's retry rules, against a real HTTP server that fails on purpose."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crucible.client import ApiError, CrucibleClient


class FlakyHandler(BaseHTTPRequestHandler):
    """Answers 503 (Retry-After: 0) to the first `failures` requests, then 200."""

    failures = 0
    seen: list[tuple[str, str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append((self.path, self.headers.get("Idempotency-Key")))
        if len(type(self).seen) <= type(self).failures:
            self._reply(503, {"detail": "database unavailable"}, {"Retry-After": "0"})
        else:
            self._reply(200, {"ok": True})

    def do_GET(self) -> None:
        self._reply(404, {"detail": "run 7 not found"})

    def _reply(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[tuple[str, type[FlakyHandler]]]:
    handler = type("Handler", (FlakyHandler,), {"failures": 0, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def test_retries_5xx_with_the_same_idempotency_key(
    flaky: tuple[str, type[FlakyHandler]],
) -> None:
    url, handler = flaky
    handler.failures = 2
    with CrucibleClient(url, "t", backoff=0.01) as client:
        assert client.request("POST", "/api/v1/runs/1/metrics", json={}) == {"ok": True}
    keys = {key for _, key in handler.seen}
    assert len(handler.seen) == 3
    assert len(keys) == 1 and None not in keys


def test_gives_up_after_the_retry_budget(flaky: tuple[str, type[FlakyHandler]]) -> None:
    url, handler = flaky
    handler.failures = 100
    with (
        CrucibleClient(url, "t", retries=2, backoff=0.01) as client,
        pytest.raises(ApiError, match="503"),
    ):
        client.request("POST", "/x", json={})
    assert len(handler.seen) == 3


def test_client_errors_are_not_retried(flaky: tuple[str, type[FlakyHandler]]) -> None:
    url, _ = flaky
    with (
        CrucibleClient(url, "t", backoff=0.01) as client,
        pytest.raises(ApiError, match="run 7 not found") as error,
    ):
        client.request("GET", "/api/v1/runs/7")
    assert error.value.status == 404


def test_unreachable_api_says_so() -> None:
    with (
        CrucibleClient("http://127.0.0.1:9", "t", retries=1, backoff=0.01) as client,
        pytest.raises(ApiError, match="cannot reach"),
    ):
        client.request("GET", "/healthz")
