"""How an answer reaches the HTTP client: a JSON body, or server-sent events as OpenAI sends
them; and work that stops when its client goes away, so that the engine computes no tokens
nobody will read (a cancelled generation aborts its engine requests, freeing their blocks).
"""

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from crucible.engine.async_engine import EngineStopped
from crucible.serving.openai.errors import error_body

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before its answer (nginx's)."""


def json_response(body: BaseModel) -> Response:
    return Response(body.model_dump_json(), media_type="application/json")


def event_stream(chunks: AsyncGenerator[str, None]) -> Response:
    """Server-sent events as OpenAI sends them: `data: <json>` each, then `data: [DONE]`."""

    async def events() -> AsyncGenerator[str, None]:
        try:
            async with contextlib.aclosing(chunks) as body:
                async for chunk in body:
                    yield chunk
        except EngineStopped as exc:
            # The status line went out with the first chunk; the error travels as an event.
            yield error_body(str(exc), type="server_error").model_dump_json()
        yield "[DONE]"

    response: Response = EventSourceResponse(events(), sep="\n")
    return response


async def unless_client_leaves(http: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` unless the client goes away first, which cancels it (and so aborts its
    engine requests: nobody would read their tokens); whether it ran to the end."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(http))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False
    task.result()  # its exception, if it raised one
    return True


async def _disconnect(http: Request) -> None:
    # The body has been read: what the server sends next is the client going away.
    while (await http.receive())["type"] != "http.disconnect":
        pass
