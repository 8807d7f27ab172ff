"""Server-Sent Events fed by polling the events table.

Polling the database (not an in-process queue) is what lets any API replica serve any
stream, and lets a client resume after a disconnect from its Last-Event-ID. A database
outage does not end a stream: once the response has started there is no status left to
answer with, so the stream waits for the database and carries on from the last event sent.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from crucible.api.errors import DATABASE_UNAVAILABLE
from crucible.schemas.runs import RunEventPublic

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
OUTAGE_POLL_SECONDS = 2.0


async def event_stream(
    request: Request,
    fetch: Callable[[int], list[RunEventPublic]],
    after_id: int,
) -> AsyncIterator[dict[str, str]]:
    while not await request.is_disconnected():
        try:
            events = await run_in_threadpool(fetch, after_id)
        except DATABASE_UNAVAILABLE as exc:
            log.warning("event stream waits for the database: %s", type(exc).__name__)
            await asyncio.sleep(OUTAGE_POLL_SECONDS)
            continue
        for event in events:
            after_id = event.id
            yield {"id": str(event.id), "event": event.type, "data": event.model_dump_json()}
        if not events:
            await asyncio.sleep(POLL_SECONDS)
