"""Wrong credentials are counted per client IP; past the limit its wrong ones get 429.

A token (and a sign-in code) is 32 random bytes, so guessing one is hopeless anyway; the
limit makes guessing visible (429s with Retry-After) instead of silent, and it never
refuses a right credential: many users may share one address (a NAT, a proxy), and a
guesser among them must not lock the others out. The client IP is the connection's unless
the request came through a proxy the server trusts (CRUCIBLE_TRUSTED_PROXIES).

What counts is distinct wrong credentials: a guesser must vary them, while a workload left
with a revoked token repeats the same one, and must not be limited for it. With a Redis
(the workers' broker) the API replicas share the count, so the limit is per address for
the whole control plane; without one (the embedded mode) each process counts in memory.
A Redis that does not answer limits nothing: a right token must keep working through a
broker outage, and guessing a token is hopeless anyway.
"""

import hashlib
import logging
import math
import threading
import time

import redis

from crucible.settings import Settings

log = logging.getLogger(__name__)


class TooManyFailedAttempts(Exception):
    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            "too many failed authentication attempts from this address; a valid token "
            f"works at once, another wrong one after {retry_after_seconds} s"
        )
        self.retry_after_seconds = retry_after_seconds


class MemoryFailures:
    """Recent failures per client in this process: client -> credential digest -> time."""

    def __init__(self) -> None:
        self._failures: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def recent(self, client: str, since: float) -> list[float]:
        with self._lock:
            failures = self._failures.setdefault(client, {})
            for digest in [d for d, at in failures.items() if at <= since]:
                del failures[digest]
            return list(failures.values())

    def add(self, client: str, digest: str, at: float, window_seconds: float) -> None:
        with self._lock:
            self._failures.setdefault(client, {})[digest] = at
            if len(self._failures) > 10_000:  # a flood of addresses: forget the quiet ones
                for quiet in [c for c, f in self._failures.items() if not f]:
                    del self._failures[quiet]


class RedisFailures:
    """The same in Redis, shared by every API replica: a sorted set per client, members the
    credential digests, scores the wall-clock times, expiring with the window."""

    PREFIX = "crucible:auth-failures:"

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def recent(self, client: str, since: float) -> list[float]:
        key = self.PREFIX + client
        try:
            pipe = self._redis.pipeline()
            pipe.zremrangebyscore(key, "-inf", since)
            pipe.zrange(key, 0, -1, withscores=True)
            _, entries = pipe.execute()
        except redis.RedisError as exc:
            log.warning("failed-authentication counts unavailable (%s); not limiting", exc)
            return []
        return [score for _, score in entries]

    def add(self, client: str, digest: str, at: float, window_seconds: float) -> None:
        key = self.PREFIX + client
        try:
            pipe = self._redis.pipeline()
            pipe.zadd(key, {digest: at})
            pipe.expire(key, math.ceil(window_seconds) + 1)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not count a failed authentication (%s)", exc)


class FailedAuthThrottle:
    def __init__(
        self, limit: int, window_seconds: float, store: MemoryFailures | RedisFailures | None = None
    ) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self._store = store or MemoryFailures()

    def check(self, client: str) -> None:
        """Raise TooManyFailedAttempts while `client` is over the limit."""
        now = time.time()
        failures = self._store.recent(client, now - self.window_seconds)
        if len(failures) < self.limit:
            return
        wait = min(failures) + self.window_seconds - now
        raise TooManyFailedAttempts(max(1, math.ceil(wait)))

    def record_failure(self, client: str, credential: str) -> None:
        digest = hashlib.sha256(credential.encode()).hexdigest()  # keep no typed secret
        self._store.add(client, digest, time.time(), self.window_seconds)


def throttle_for(settings: Settings) -> FailedAuthThrottle:
    """Shared through the broker's Redis when the server has one, else per process."""
    store: MemoryFailures | RedisFailures = MemoryFailures()
    if settings.broker_url and settings.broker_url.startswith(("redis://", "rediss://")):
        store = RedisFailures(
            redis.Redis.from_url(
                settings.broker_url, socket_timeout=0.5, socket_connect_timeout=0.5
            )
        )
    return FailedAuthThrottle(
        settings.auth_failure_limit, settings.auth_failure_window_seconds, store
    )
