"""Wrong credentials are counted per client IP; past the limit its wrong ones get 429.

A token (and a sign-in code) is 32 random bytes, so guessing one is hopeless anyway; the
limit makes guessing visible (429s with Retry-After) instead of silent, and it never
refuses a right credential: many users may share one address (a NAT, a proxy), and a
guesser among them must not lock the others out. The client IP is the connection's unless
the request came through a proxy the server trusts (CRUCIBLE_TRUSTED_PROXIES).

What counts is distinct wrong credentials: a guesser must vary them, while a workload left
with a revoked token repeats the same one, and must not be limited for it. Per process and
in memory: each API replica counts its own, which bounds the rate of 401s (not 429s) at the
replica count times the limit.
"""

import hashlib
import math
import threading
import time


class TooManyFailedAttempts(Exception):
    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            "too many failed authentication attempts from this address; a valid token "
            f"works at once, another wrong one after {retry_after_seconds} s"
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
