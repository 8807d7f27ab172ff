"""The door of the engine's API, in front of FastAPI: a /v1 request is authenticated from
its headers, and every body is bounded, before the app reads a byte of it.

FastAPI reads and parses a body before it runs a route's dependencies, so a key checked as
a dependency let anyone make the server take in and parse a body of any size. Here a
request without a key the server accepts gets its 401 with its body unread; a body over
`max_body_bytes` gets 413 at once when its Content-Length says so, and as soon as its
chunks pass the limit otherwise.
"""

from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from crucible.body_limit import call_bounded, declared_over
from crucible.serving.openai.errors import ApiError, error_response

KeyCheck = Callable[[str | None], Awaitable[None]]
"""Given the Authorization header, returns when it holds a key the server accepts and
raises `ApiError` (401, or 503 when it cannot say now) otherwise."""

GUARDED_PREFIX = "/v1"


class RequestGate:
    def __init__(self, app: ASGIApp, *, check_key: KeyCheck, max_body_bytes: int) -> None:
        self.app = app
        self.check_key = check_key
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = dict(scope["headers"])
        if path == GUARDED_PREFIX or path.startswith(GUARDED_PREFIX + "/"):
            authorization = headers.get(b"authorization")
            try:
                await self.check_key(authorization.decode("latin-1") if authorization else None)
            except ApiError as exc:
                await error_response(exc)(scope, receive, send)
                return
        if declared_over(headers, self.max_body_bytes):
            await self._too_large(scope, receive, send)
            return
        await call_bounded(
            self.app,
            scope,
            receive,
            send,
            max_bytes=self.max_body_bytes,
            refuse=self._too_large,
        )

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = ApiError(
            413,
            f"the request body is larger than this server's limit of {self.max_body_bytes} bytes",
            code="request_too_large",
        )
        await error_response(refusal)(scope, receive, send)
