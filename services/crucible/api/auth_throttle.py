"""Wrong credentials are counted per client IP; past the limit the IP waits.

A token is 32 random bytes, so guessing one is hopeless anyway; the limit is what keeps a
scanner from spending the database on hash lookups, and it makes guessing visible (429s)
instead of silent. What counts is distinct wrong credentials: a guesser must vary them,
while a workload left with a revoked token repeats the same one, and must not lock out the
other processes of its machine (in the embedded mode the browser, the executor and every
run share 127.0.0.1). Per process and in memory: each API replica counts its own, which
still bounds the rate at the replica count times the limit.
"""

import hashlib
import math
import threading
import time


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
        # client -> digest of each distinct wrong credential -> when it was last tried
        self._failures: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise TooManyFailedAttempts while `client` is over the limit."""
        now = time.monotonic()
        with self._lock:
            failures = self._recent(client, now)
            if len(failures) < self.limit:
                return
            wait = min(failures.values()) + self.window_seconds - now
        raise TooManyFailedAttempts(max(1, math.ceil(wait)))

    def record_failure(self, client: str, credential: str) -> None:
        now = time.monotonic()
        digest = hashlib.sha256(credential.encode()).hexdigest()  # keep no typed secret
        with self._lock:
            self._recent(client, now)[digest] = now
            if len(self._failures) > 10_000:  # a flood of addresses: forget the quiet ones
                for quiet in [c for c, f in self._failures.items() if not f]:
                    del self._failures[quiet]

    def _recent(self, client: str, now: float) -> dict[str, float]:
        failures = self._failures.setdefault(client, {})
        for digest in [d for d, at in failures.items() if at <= now - self.window_seconds]:
            del failures[digest]
        return failures
