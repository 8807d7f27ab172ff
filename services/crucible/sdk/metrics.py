"""Metric points from the training loop to the API without ever blocking a step.

`log` appends to a bounded in-memory buffer under a lock held for microseconds; a
background thread sends it in batches of up to 10,000 points. Each batch keeps one
Idempotency-Key across all its retries, so a retry after a lost answer stores nothing twice.
While the API is unreachable the thread retries with exponential backoff and the buffer
grows up to its bound; past the bound the oldest points are dropped and counted.
"""

import logging
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping

import orjson

from crucible.client import ApiError, CrucibleClient
from crucible.schemas.metrics import KEY_PATTERN, MAX_BATCH_POINTS, MetricPointIn

log = logging.getLogger(__name__)

_KEY = re.compile(KEY_PATTERN)
# Statuses worth retrying forever: the server or a proxy in front of it is unwell, or busy.
_RETRYABLE = frozenset({0, 408, 425, 429, 500, 502, 503, 504})

_Point = tuple[str, int, float, float]  # key, step, value, time


ENCODE_CHUNK_POINTS = 500


def _as_json(point: _Point) -> MetricPointIn:
    key, step, value, at = point
    return {"key": key, "step": step, "value": value, "time": at}


def _encode(batch: list[_Point]) -> bytes:
    """The JSON body of a batch, built a chunk at a time with the GIL let go in between: a
    training thread waiting for the GIL (after every CUDA launch or CPU kernel) would
    otherwise wait for the whole batch, up to the interpreter's 5 ms switch interval."""
    parts = []
    for start in range(0, len(batch), ENCODE_CHUNK_POINTS):
        chunk = [_as_json(p) for p in batch[start : start + ENCODE_CHUNK_POINTS]]
        parts.append(orjson.dumps(chunk)[1:-1])
        time.sleep(0)
    return b'{"points":[' + b",".join(parts) + b"]}"


class MetricShipper:
    def __init__(
        self,
        client: CrucibleClient,
        run_id: int,
        *,
        max_buffered_points: int,
        batch_points: int = MAX_BATCH_POINTS,
        flush_interval: float = 2.0,
        max_backoff: float = 10.0,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._bound = max_buffered_points
        self._batch_points = min(batch_points, MAX_BATCH_POINTS)
        self._flush_interval = flush_interval
        self._max_backoff = max_backoff
        # Tuples, not dicts: about 100 bytes a point instead of 400, so the default
        # 1,000,000-point bound costs ~100 MB at worst.
        self._buffer: deque[_Point] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._in_flight = 0
        self._flush_requested = False
        self._stopping = False
        self._stopped = threading.Event()
        self._known_keys: set[str] = set()
        self.dropped_points = 0
        self.sent_points = 0
        self._warned_unreachable = False
        self._warned_dropping = False
        self._warned_non_finite = False
        self._thread = threading.Thread(target=self._run, name="crucible-metrics", daemon=True)
        self._thread.start()

    # -- the training thread's side ----------------------------------------------------------

    def add(self, values: Mapping[str, float], step: int) -> None:
        now = time.time()
        points: list[_Point] = []
        for key, value in values.items():
            if key not in self._known_keys:
                self._check_key(key)
            number = float(value)
            if not math.isfinite(number):
                self._warn_non_finite(key, number, step)
                continue
            points.append((key, step, number, now))
        with self._lock:
            self._buffer.extend(points)
            overflow = len(self._buffer) - self._bound
            if overflow > 0:
                for _ in range(overflow):
                    self._buffer.popleft()
                self.dropped_points += overflow
            if len(self._buffer) >= self._batch_points:
                self._wake.notify_all()
        if overflow > 0 and not self._warned_dropping:
            self._warned_dropping = True
            log.warning(
                "crucible: the metric buffer is full (%d points, API unreachable or slow); "
                "dropping the oldest points from now on, see run.dropped_points",
                self._bound,
            )

    def _check_key(self, key: str) -> None:
        if not isinstance(key, str) or not 1 <= len(key) <= 250 or not _KEY.match(key):
            raise ValueError(
                f"metric key {key!r} is invalid: use 1 to 250 characters, no commas or "
                "control characters"
            )
        self._known_keys.add(key)

    def _warn_non_finite(self, key: str, value: float, step: int) -> None:
        if not self._warned_non_finite:
            self._warned_non_finite = True
            log.warning(
                "crucible: metric %r is %s at step %d; non-finite values are not stored "
                "(warned once)",
                key,
                value,
                step,
            )

    @property
    def pending_points(self) -> int:
        with self._lock:
            return len(self._buffer) + self._in_flight

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything buffered now; True when it all arrived before `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flush_requested = True
            self._wake.notify_all()
            while self._buffer or self._in_flight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._wake.wait(remaining if remaining is None else min(remaining, 0.5))
            return True

    def close(self, timeout: float | None) -> bool:
        """Flush, then stop the thread; True when nothing was left unsent."""
        done = self.flush(timeout)
        with self._lock:
            self._stopping = True
            self._stopped.set()
            self._wake.notify_all()
        self._thread.join(timeout=5.0)
        if not done:
            log.warning(
                "crucible: %d metric points were not sent before the flush timeout",
                self.pending_points,
            )
        if self.dropped_points:
            log.warning(
                "crucible: %d metric points were dropped because the buffer bound (%d) was "
                "exceeded while the API was unreachable",
                self.dropped_points,
                self._bound,
            )
        return done

    # -- the background thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and (
                    len(self._buffer) < self._batch_points and not self._flush_requested
                ):
                    if not self._wake.wait(self._flush_interval):
                        break  # interval elapsed: send what there is
                if self._stopping:
                    return
                count = min(len(self._buffer), self._batch_points)
                batch = [self._buffer.popleft() for _ in range(count)]
                self._in_flight = count
                if not self._buffer:
                    self._flush_requested = False
            sent = self._send(_encode(batch), len(batch)) if batch else True
            with self._lock:
                if not sent:  # stopped while the API was away: keep it counted as pending
                    self._buffer.extendleft(reversed(batch))
                self._in_flight = 0
                self._wake.notify_all()

    def _send(self, body: bytes, count: int) -> bool:
        """Deliver the batch, retrying until stopped; False when stopped before it arrived."""
        key = uuid.uuid4().hex
        attempt = 0
        while True:
            try:
                self._client.request(
                    "POST",
                    f"/api/v1/runs/{self._run_id}/metrics",
                    content=body,
                    idempotency_key=key,
                )
            except ApiError as exc:
                if exc.status not in _RETRYABLE:
                    log.error(
                        "crucible: the API refused %d metric points, which are dropped: %s",
                        count,
                        exc,
                    )
                    with self._lock:
                        self.dropped_points += count
                    return True
                if not self._warned_unreachable:
                    self._warned_unreachable = True
                    log.warning(
                        "crucible: cannot send metrics (%s); training continues, points are "
                        "kept in memory and retried with backoff (warned once)",
                        exc,
                    )
                # Not the condition: every log() call would cut the backoff short.
                if self._stopped.wait(min(0.5 * 2**attempt, self._max_backoff)):
                    return False
                attempt += 1
                continue
            self.sent_points += count
            if self._warned_unreachable and attempt:
                log.info("crucible: metrics reach the API again")
            return True
