"""Failed credential checks are counted per client IP; past the limit the IP waits.

A token is 32 random bytes, so guessing one is hopeless anyway; the limit is what keeps a
misconfigured client or a scanner from spending the database on hash lookups, and it makes
guessing visible (429s) instead of silent. Per process and in memory: each API replica
counts its own, which still bounds the rate at the replica count times the limit.
"""

import math
import threading
import time
from collections import deque


class TooManyFailedAttempts(Exception):
    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            "too many failed authentication attempts from this address; "
            f"retry in {retry_after_seconds} s with a valid token"
        )
        self.retry_after_seconds = retry_after_seconds


class FailedAuthThrottle:
    def __init__(self, limit: int, window_seconds: float) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise TooManyFailedAttempts while `client` is over the limit."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(client, now)
            if len(failures) < self.limit:
                return
            wait = failures[0] + self.window_seconds - now
        raise TooManyFailedAttempts(max(1, math.ceil(wait)))

    def record_failure(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._recent(client, now).append(now)
            if len(self._failures) > 10_000:  # a flood of addresses: forget the quiet ones
                for quiet in [c for c, f in self._failures.items() if not f]:
                    del self._failures[quiet]

    def _recent(self, client: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(client, deque())
        while failures and failures[0] <= now - self.window_seconds:
            failures.popleft()
        return failures
