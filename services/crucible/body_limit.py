"""Bounding a request body an ASGI app reads: by its declared Content-Length at once, and by
the bytes of its chunks as they come. Shared by the control plane's API and the engine's
OpenAI front, which answer a refusal each in its own shape."""

import contextlib
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

Refuse = Callable[[Scope, Receive, Send], Awaitable[None]]
"""Sends the 413 of the server at hand."""


def declared_over(headers: dict[bytes, bytes], max_bytes: int) -> bool:
    """Whether the request's Content-Length says its body is over `max_bytes`."""
    declared = headers.get(b"content-length")
    return (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and int(declared) > max_bytes
    )


async def call_bounded(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, *, max_bytes: int, refuse: Refuse
) -> None:
    """`app`, with a body that stops being read once it passes `max_bytes`; then `refuse`,
    unless the app had already begun its answer."""
    received = 0
    too_large = started = False

    async def counting_receive() -> Message:
        nonlocal received, too_large
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                too_large = True
                raise _TooLarge
        return message

    async def send_unless_too_large(message: Message) -> None:
        # The framework catches _TooLarge while it reads the body and answers 400 of its
        # own; that answer is dropped, and the refusal sent instead.
        nonlocal started
        if not too_large:
            started = started or message["type"] == "http.response.start"
            await send(message)

    with contextlib.suppress(_TooLarge):
        await app(scope, counting_receive, send_unless_too_large)
    if too_large and not started:
        await refuse(scope, receive, send)


class _TooLarge(Exception):
    pass
