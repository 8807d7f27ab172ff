"""The workers as a thread of `crucible up`: the same handlers and sweeps as `crucible worker`,
with the database itself as the queue (no broker in the embedded mode).

A message whose handler fails stays unhandled and is retried with a growing delay, so one
poison message neither blocks the others nor floods the log.
"""

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from crucible.workers import metrics
from crucible.workers.handlers import handle_message
from crucible.workers.relay import unhandled_ids
from crucible.workers.sweeps import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    advance_sweeps,
    expire_silent_attempts,
    promote_recovering,
    retire_checkpoints,
)

log = logging.getLogger(__name__)

MAX_RETRY_DELAY_SECONDS = 60.0


class InProcessWorkers:
    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
        watchdog_every_seconds: float = 10.0,
        sweeps_every_seconds: float = 2.0,
    ) -> None:
        self._factory = factory
        self._heartbeat_timeout = heartbeat_timeout_seconds
        self._watchdog_every = watchdog_every_seconds
        self._next_watchdog = 0.0
        self._sweeps_every = sweeps_every_seconds
        self._next_sweeps = 0.0
        # message id -> (failures so far, monotonic time before which it is not retried)
        self._failing: dict[int, tuple[int, float]] = {}

    def run(self, stop: threading.Event, poll_seconds: float = 0.2) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # the database busy or restarting: try again next tick
                log.exception("in-process workers: tick failed")
            stop.wait(poll_seconds)

    def tick(self) -> None:
        for message_id in unhandled_ids(self._factory):
            self._handle(message_id)
        promote_recovering(self._factory)
        now = time.monotonic()
        if now >= self._next_sweeps:
            self._next_sweeps = now + self._sweeps_every
            advance_sweeps(self._factory)
        if now >= self._next_watchdog:
            self._next_watchdog = now + self._watchdog_every
            expire_silent_attempts(self._factory, self._heartbeat_timeout)
            retire_checkpoints(self._factory)

    def _handle(self, message_id: int) -> None:
        failures, not_before = self._failing.get(message_id, (0, 0.0))
        if time.monotonic() < not_before:
            return
        try:
            handle_message(self._factory, message_id)
        except Exception:
            failures += 1
            delay = min(0.5 * 2**failures, MAX_RETRY_DELAY_SECONDS)
            self._failing[message_id] = (failures, time.monotonic() + delay)
            metrics.MESSAGES.labels("unknown", "error").inc()
            log.exception(
                "outbox message %d failed (%d times); retry in %.0f s", message_id, failures, delay
            )
            return
        self._failing.pop(message_id, None)
