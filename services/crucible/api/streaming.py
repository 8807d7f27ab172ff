"""Server-Sent Events fed by polling the events table.

Polling the database (not an in-process queue) is what lets any API replica serve any
stream, and lets a client resume after a disconnect from its Last-Event-ID.
"""

import asyncio
from collections.abc import AsyncIterator, Callable

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from crucible.schemas.runs import RunEventPublic

POLL_SECONDS = 0.5


async def event_stream(
    request: Request,
    fetch: Callable[[int], list[RunEventPublic]],
    after_id: int,
) -> AsyncIterator[dict[str, str]]:
    while not await request.is_disconnected():
        events = await run_in_threadpool(fetch, after_id)
        for event in events:
            after_id = event.id
            yield {"id": str(event.id), "event": event.type, "data": event.model_dump_json()}
        if not events:
            await asyncio.sleep(POLL_SECONDS)
