"""Metric points from the training loop to the API without ever blocking a step.

`log` appends one row (a step's values) to a bounded in-memory buffer under a lock held for
microseconds; a background thread sends the rows in batches of up to 10,000 points, as
columns (`MetricBatch.columns`: the keys once per run of rows that logged the same keys,
then plain lists of steps, times and values), which costs the SDK a few calls per row and
the API no object per point; on a step that holds the GIL every bit of the SDK's Python
work, in either thread, is time the step waits. Each batch keeps one
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
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from crucible.client import ApiError, CrucibleClient
from crucible.client.http import TRANSIENT_STATUSES
from crucible.schemas.metrics import KEY_PATTERN, MAX_BATCH_POINTS

log = logging.getLogger(__name__)

_KEY = re.compile(KEY_PATTERN)

_Row = tuple[int, float, dict[str, float]]  # step, time, key -> value


# Encoding a chunk this size holds the GIL for less than the request that follows holds it
# between its socket calls (measured in benchmarks/README.md, "SDK overhead").
ENCODE_CHUNK_POINTS = 2_000


def _encode(batch: list[_Row]) -> bytes:
    """The JSON body of a batch as `MetricBatch.columns`: consecutive rows that logged the
    same keys (in the same order) make one group, so the keys are written once per group
    and the numbers as plain lists. Grouping is a few C-level calls per row, not per point;
    the GIL is let go after every `ENCODE_CHUNK_POINTS` points or so: a training thread
    waiting for it (after every CUDA launch or CPU kernel) would otherwise wait for the
    whole batch, up to the interpreter's 5 ms switch interval."""
    groups: list[dict[str, list[Any]]] = []
    keys: tuple[str, ...] = ()
    steps: list[int] = []
    times: list[float] = []
    values: list[float] = []
    since_yield = 0
    for step, now, numbers in batch:
        row_keys = tuple(numbers)
        if row_keys != keys:
            keys, steps, times, values = row_keys, [], [], []
            groups.append({"keys": list(keys), "steps": steps, "times": times, "values": values})
        steps.append(step)
        times.append(now)
        values += numbers.values()
        since_yield += len(row_keys)
        if since_yield >= ENCODE_CHUNK_POINTS:
            since_yield = 0
            time.sleep(0)
    return orjson.dumps({"columns": groups})


def _rows_of(step: int, now: float, numbers: dict[str, float], limit: int) -> list[_Row]:
    """One `log` call's row, split when it alone holds more than `limit` points (a batch)."""
    if not numbers:
        return []
    if len(numbers) <= limit:
        return [(step, now, numbers)]
    items = list(numbers.items())
    return [(step, now, dict(items[i : i + limit])) for i in range(0, len(items), limit)]


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
        # One row per log() call; the bound counts points (`_buffered_points`).
        self._buffer: deque[_Row] = deque()
        self._buffered_points = 0
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
        # This runs right after a step, with the caches full of the step's work: every call
        # into C here costs microseconds, not the tenths it costs in a tight loop (benchmarks/
        # README.md, "SDK overhead"), so the common case makes as few as it can.
        now = time.time()
        if not self._known_keys.issuperset(values):
            for key in values:
                if key not in self._known_keys:
                    self._check_key(key)
        # A copy (the caller may reuse its dict), as floats (a tensor's value now, not later).
        numbers = {key: float(value) for key, value in values.items()}
        # A sum is finite when every term is: one C loop instead of a call per value. A sum
        # that overflows sends the values through the check one by one, which keeps them all.
        if not math.isfinite(sum(numbers.values())):
            numbers = self._finite_only(numbers, step)
        count = len(numbers)
        if 0 < count <= self._batch_points:
            rows: Iterable[_Row] = ((step, now, numbers),)
        else:  # nothing left, or more points than a batch holds
            rows = _rows_of(step, now, numbers, self._batch_points)
        with self._lock:
            self._buffer.extend(rows)
            self._buffered_points += count
            overflow = self._drop_oldest() if self._buffered_points > self._bound else 0
            if self._buffered_points >= self._batch_points:
                self._wake.notify_all()
        if overflow and not self._warned_dropping:
            self._warned_dropping = True
            log.warning(
                "crucible: the metric buffer is full (%d points, API unreachable or slow); "
                "dropping the oldest points from now on, see run.dropped_points",
                self._bound,
            )

    def _drop_oldest(self) -> int:
        """Drop the oldest rows down to the bound (the lock held); the points dropped."""
        overflow = 0
        while self._buffered_points > self._bound:
            dropped = len(self._buffer.popleft()[2])
            self._buffered_points -= dropped
            overflow += dropped
        self.dropped_points += overflow
        return overflow

    def _finite_only(self, numbers: dict[str, float], step: int) -> dict[str, float]:
        for key, number in list(numbers.items()):
            if not math.isfinite(number):
                self._warn_non_finite(key, number, step)
                del numbers[key]
        return numbers

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
            return self._buffered_points + self._in_flight

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
                    self._buffered_points < self._batch_points and not self._flush_requested
                ):
                    if not self._wake.wait(self._flush_interval):
                        break  # interval elapsed: send what there is
                if self._stopping:
                    return
                batch, count = self._take_batch()
                self._in_flight = count
                if not self._buffer:
                    self._flush_requested = False
            sent = self._send(_encode(batch), count) if batch else True
            with self._lock:
                if not sent:  # stopped while the API was away: keep it counted as pending
                    self._buffer.extendleft(reversed(batch))
                    self._buffered_points += count
                self._in_flight = 0
                self._wake.notify_all()

    def _take_batch(self) -> tuple[list[_Row], int]:
        """The oldest rows up to one batch's worth of points (the lock held)."""
        if self._buffered_points <= self._batch_points:  # all of it, the usual case
            batch, count = list(self._buffer), self._buffered_points
            self._buffer.clear()
            self._buffered_points = 0
            return batch, count
        batch = []
        count = 0
        while self._buffer and count + len(self._buffer[0][2]) <= self._batch_points:
            row = self._buffer.popleft()
            batch.append(row)
            count += len(row[2])
        self._buffered_points -= count
        return batch, count

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
                if exc.status not in TRANSIENT_STATUSES:
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
