"""Reject oversized request bodies with 413 before they are read into memory, and JSON
bodies nested deeper than any request needs with 422 before they are parsed."""

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crucible.body_limit import call_bounded, declared_over

MAX_JSON_BODY_DEPTH = 100
"""Levels of maps and lists in a JSON body: the envelope's few and a free-form value's
(`json_values.MAX_JSON_DEPTH`). Python's parser takes hundreds, and echoing such a value
back in a validation error then ran out of stack (a 500)."""

_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')
_INNERMOST = re.compile(rb"\[\]|\{\}")


def json_depth_over(body: bytes, limit: int) -> bool:
    """Whether the JSON `body` nests maps and lists deeper than `limit`, found with bytes
    operations rather than a parser's recursion (and at a small part of a parse's cost):
    escapes dropped, so that every quote left opens or closes a string (JSON has no
    backslash outside one); then the brackets outside strings, innermost pairs removed one
    level a pass. A body that is not JSON is left to the parser to refuse."""
    marks = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_MARKS)
    brackets = marks.replace(b'""', b"")
    if b'"' in brackets:  # a string holds a bracket: keep what lies outside the quotes
        brackets = b"".join(marks.split(b'"')[::2])
    for _ in range(limit):
        if not brackets:
            return False
        inner = _INNERMOST.sub(b"", brackets)  # one pass: one level, not two
        if inner == brackets:
            return False  # unbalanced: not JSON
        brackets = inner
    return bool(brackets)


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, max_json_depth: int = MAX_JSON_BODY_DEPTH):
        self.app = app
        self.max_bytes = max_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if declared_over(headers, self.max_bytes):
            await self._reject(scope, receive, send)
            return
        if _is_json(headers.get(b"content-type", b"")):
            body = await self._read(receive)
            if body is None:
                await self._reject(scope, receive, send)
                return
            if json_depth_over(body, self.max_json_depth):
                await _refuse_depth(send, self.max_json_depth)
                return
            receive = _replay(body, receive)
        await call_bounded(
            self.app, scope, receive, send, max_bytes=self.max_bytes, refuse=self._reject
        )

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b'{"detail":"request body larger than the limit of %d bytes"}' % self.max_bytes
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body (the framework reads a JSON one whole anyway), or None past the
        limit."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client left; the app sees an empty body and answers no one
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read, then the client's own messages (its disconnect, when it leaves)."""
    sent = False

    async def replaying() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replaying


async def _refuse_depth(send: Send, limit: int) -> None:
    detail = [
        {
            "loc": ["body"],
            "msg": f"the JSON body is nested deeper than the limit of {limit} levels",
            "type": "value_error",
        }
    ]
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
