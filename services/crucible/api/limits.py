"""Reject oversized request bodies with 413 before they are read into memory."""

import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        received = 0
        too_large = started = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _TooLarge
            return message

        async def send_unless_too_large(message: Message) -> None:
            # The framework catches _TooLarge while parsing the body and answers 400 of its
            # own; that answer is dropped, and the 413 below sent instead.
            nonlocal started
            if not too_large:
                started = started or message["type"] == "http.response.start"
                await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, counting_receive, send_unless_too_large)
        if too_large and not started:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
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


class _TooLarge(Exception):
    pass
