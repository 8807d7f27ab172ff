"""Fault 4: Postgres restarted (a clean fast shutdown, then a crash) under API load.

Six clients without retries hit a mix of reads and writes while the private Postgres goes
away twice. During each outage they must get 503 with Retry-After, never another 5xx; the
same API process must serve again by itself once Postgres is back; every write it
acknowledged must be in the database; and an event stream opened before the outages must
still deliver events after them.
"""

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.api.conftest import ApiProcess, PrivatePostgres
from tests.conftest import ADMIN_TOKEN, bearer, training_run
from tests.stored_metrics import stored_points

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

CLIENTS = 6


@dataclass
class Outcomes:
    statuses: Counter[int] = field(default_factory=Counter)
    unavailable_without_retry_after: int = 0
    errors: list[str] = field(default_factory=list)
    acknowledged_steps: list[int] = field(default_factory=list)
    acknowledged_runs: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, response: httpx.Response) -> None:
        with self.lock:
            self.statuses[response.status_code] += 1
            if response.status_code == 503 and not response.headers.get("retry-after"):
                self.unavailable_without_retry_after += 1
            if response.status_code >= 500 and response.status_code != 503:
                self.errors.append(
                    f"{response.request.method} {response.request.url.path}: "
                    f"{response.status_code} {response.text[:200]}"
                )


class Load:
    """Each client cycles through a write of metric points, a run submission and reads."""

    def __init__(self, url: str, run_id: int, outcomes: Outcomes) -> None:
        self.url = url
        self.run_id = run_id
        self.outcomes = outcomes
        self.stop = threading.Event()
        self._steps = iter(range(10**9))
        self._steps_lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)
        ]

    def _next_steps(self, count: int) -> list[int]:
        with self._steps_lock:
            return [next(self._steps) for _ in range(count)]

    def _client(self, index: int) -> None:
        with httpx.Client(base_url=self.url, headers=bearer(ADMIN_TOKEN), timeout=30) as http:
            while not self.stop.is_set():
                steps = self._next_steps(10)
                points = [{"key": "load", "step": s, "value": float(s)} for s in steps]
                self._call(
                    http,
                    "POST",
                    f"/api/v1/runs/{self.run_id}/metrics",
                    json={"points": points},
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                    acknowledged=lambda: self.outcomes.acknowledged_steps.extend(steps),
                )
                name = f"load-{index}-{uuid.uuid4().hex[:8]}"
                self._call(
                    http,
                    "POST",
                    "/api/v1/runs",
                    json={"project": "chaos", "manifest": training_run(name=name)},
                    acknowledged=lambda name=name: self.outcomes.acknowledged_runs.append(name),
                )
                self._call(http, "GET", "/api/v1/runs", params={"project": "chaos", "limit": 5})
                self._call(http, "GET", f"/api/v1/runs/{self.run_id}/metrics")
                self._call(http, "GET", f"/api/v1/lineage/run/{self.run_id}")
                time.sleep(0.02)

    def _call(self, http: httpx.Client, method: str, path: str, acknowledged=None, **kw) -> None:  # type: ignore[no-untyped-def]
        try:
            response = http.request(method, path, **kw)
        except httpx.TransportError as exc:
            with self.outcomes.lock:
                self.outcomes.errors.append(f"{method} {path}: {type(exc).__name__}")
            return
        self.outcomes.record(response)
        if response.status_code in (200, 201) and acknowledged is not None:
            with self.outcomes.lock:
                acknowledged()


class EventStream:
    """A client following a run's events over SSE from before the outages."""

    def __init__(self, url: str, run_id: int) -> None:
        self.types: list[str] = []
        self.ended: str | None = None
        self._url = f"{url}/api/v1/runs/{run_id}/events/stream"
        self.thread = threading.Thread(target=self._follow, daemon=True)

    def _follow(self) -> None:
        timeout = httpx.Timeout(30, read=None)
        try:
            with httpx.stream("GET", self._url, headers=bearer(ADMIN_TOKEN), timeout=timeout) as r:
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        self.types.append(line.removeprefix("event:").strip())
            self.ended = "the server ended the stream"
        except httpx.HTTPError as exc:
            self.ended = f"{type(exc).__name__}: {exc}"


def wait_for(condition, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_postgres_restarts_give_503_then_recover_losing_nothing(
    api_process: ApiProcess, private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    admin = httpx.Client(base_url=api_process.url, headers=bearer(ADMIN_TOKEN), timeout=30)
    assert admin.post("/api/v1/projects", json={"name": "chaos"}).status_code == 201
    run = admin.post(
        "/api/v1/runs", json={"project": "chaos", "manifest": training_run(name="followed")}
    ).json()
    stream = EventStream(api_process.url, run["id"])
    stream.thread.start()
    wait_for(lambda: len(stream.types) > 0, "the submission event")
    before = len(stream.types)

    outcomes = Outcomes()
    load = Load(api_process.url, run["id"], outcomes)
    for thread in load.threads:
        thread.start()
    outages = {}
    try:
        for mode in ("fast", "immediate"):
            served = sum(outcomes.statuses.values())
            wait_for(lambda s=served: sum(outcomes.statuses.values()) > s + 50, "load")
            unavailable = outcomes.statuses[503]
            private_postgres.restart(mode)
            # Recovered by itself: the same process serves writes again.
            ok = outcomes.statuses[201]
            wait_for(lambda o=ok: outcomes.statuses[201] > o + 10, f"recovery after {mode}")
            outages[mode] = outcomes.statuses[503] - unavailable
    finally:
        load.stop.set()
        for thread in load.threads:
            thread.join(60)

    assert outcomes.errors == []
    assert outcomes.unavailable_without_retry_after == 0
    assert outages["fast"] > 0 and outages["immediate"] > 0, outages
    assert set(outcomes.statuses) <= {200, 201, 503}, outcomes.statuses

    # The stream opened before the outages still carries new events.
    assert admin.post(f"/api/v1/runs/{run['id']}/cancel").status_code == 200
    wait_for(
        lambda: len(stream.types) > before or stream.ended is not None,
        "the cancel event on the stream",
        timeout=60,
    )
    assert stream.ended is None, stream.ended
    assert len(stream.types) > before

    engine = create_engine(api_process.env["CRUCIBLE_DATABASE_URL"])
    with engine.connect() as connection:
        steps = {point[2] for point in stored_points(connection, run["id"])}
        names = set(connection.scalars(text("SELECT name FROM runs")))
    engine.dispose()
    admin.close()
    assert set(outcomes.acknowledged_steps) <= steps
    assert set(outcomes.acknowledged_runs) <= names
    (tmp_path / "figures.txt").write_text(f"{dict(outcomes.statuses)} outages={outages}\n")
    print(
        f"\nfault 4: statuses {dict(outcomes.statuses)}, 503s per outage {outages}, "
        f"{len(outcomes.acknowledged_steps)} points and {len(outcomes.acknowledged_runs)} runs "
        "acknowledged, all found"
    )
