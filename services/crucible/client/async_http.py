"""The REST client for code on an event loop (the operator): the calls of calls.py, sent
with the blocking client's headers, retries and errors (http.py), without a thread per call.

At most `in_flight` requests are sent at once; the rest wait on a semaphore, which costs
nothing per waiter, where httpx's pool does bookkeeping over every queued request each time
one starts or ends (see crucible_operator/kube.py, which bounds the Kubernetes client so).
"""

import asyncio
from typing import TypeVar

import httpx
import orjson

from crucible.client.calls import Call
from crucible.client.http import (
    RETRY_STATUSES,
    ApiError,
    answer_of,
    present,
    request_headers,
    retry_delay,
    token_of,
    unreachable,
)
from crucible.settings import Settings

T = TypeVar("T")


class AsyncCrucibleClient:
    def __init__(
        self,
        api_url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        in_flight: int = 16,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight),
        )
        self._retries = retries
        self._backoff = backoff
        self._gate = asyncio.Semaphore(in_flight)

    @classmethod
    def from_settings(cls, settings: Settings) -> "AsyncCrucibleClient":
        return cls(settings.api_url, token_of(settings))

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        content = None if call.body is None else orjson.dumps(call.json())
        headers = request_headers(call.method, content, None)
        params = present(dict(call.params))
        for attempt in range(self._retries + 1):
            try:
                async with self._gate:
                    response = await self._http.request(
                        call.method, call.path, content=content, params=params, headers=headers
                    )
            except httpx.TransportError as exc:
                if attempt == self._retries:
                    raise unreachable(self._http.base_url, exc, call.method, call.path) from exc
                await asyncio.sleep(retry_delay(self._backoff, attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and attempt < self._retries:
                retry_after = response.headers.get("Retry-After")
                await asyncio.sleep(retry_delay(self._backoff, attempt, retry_after))
                continue
            try:
                return call.parse(answer_of(response, call.method, call.path))
            except ApiError as exc:
                if call.missing_is_none and exc.status == 404:
                    return None  # type: ignore[return-value]  # the call's type says so
                raise
        raise AssertionError("unreachable")
