"""What the workers may still be handed: copies of handler messages in the broker's Redis,
queued or taken by a worker and not yet acknowledged (kombu keeps those in its `unacked`
hash until the ack, and puts them back in the queue when their worker dies)."""

import base64
import json
from dataclasses import dataclass
from typing import Any

import redis
from kombu.transport.redis import Channel

from crucible.workers.celery_app import HANDLE_TASK, HANDLER_QUEUE


@dataclass(frozen=True)
class Copy:
    """One copy of a handler message in Redis."""

    where: str  # "queued" or "taken"
    delivery_tag: str  # a taken one's, by which kombu knows the worker's delivery
    task_id: str
    message_id: int  # the outbox row it delivers


def handler_copies(client: redis.Redis) -> list[Copy]:
    copies = []
    for key in client.keys(f"{HANDLER_QUEUE}*"):
        name = _text(key)
        # The queue, and its per-priority lists (kombu's separator, then the priority).
        if name == HANDLER_QUEUE or name.startswith(f"{HANDLER_QUEUE}\x06\x16"):
            copies += [_copy(json.loads(raw), "queued", "") for raw in client.lrange(key, 0, -1)]
    for tag, raw in client.hgetall(Channel.unacked_key).items():
        copies.append(_copy(json.loads(raw)[0], "taken", _text(tag)))
    return [c for c in copies if c is not None]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _copy(message: dict[str, Any], where: str, tag: str) -> Copy | None:
    headers = message["headers"]
    if headers.get("task") != HANDLE_TASK:
        return None  # a beat tick
    # Celery's body: [args, kwargs, embed]; a handler task's args are [message id].
    args = json.loads(base64.b64decode(message["body"]))[0]
    return Copy(where, tag, headers["id"], int(args[0]))
