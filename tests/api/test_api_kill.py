"""Fault 1: the API process SIGKILLed twice while eight clients ingest metrics.

Each client is the SDK's own MetricShipper (one Idempotency-Key per batch across its
retries, retrying with backoff while the API is away). Once every shipper has flushed,
every point a client logged must be in the database exactly once: one row per
(series, step) with the logged value, and the per-series counters and rollups, which a
replayed batch would inflate, agreeing with the rows.
"""

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from crucible.client import CrucibleClient
from crucible.schemas.runs import AttemptStart, RunSubmit
from crucible.schemas.tenancy import ProjectCreate
from crucible.sdk.metrics import MetricShipper
from tests.api.conftest import ApiProcess
from tests.conftest import ADMIN_TOKEN, training_run
from tests.stored_metrics import stored_point_count, stored_points

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

CLIENTS = 8
KEYS = ("train/loss", "train/lr")


def value_of(client: int, key: str, step: int) -> float:
    return client * 1_000_000 + step + (0.5 if key == KEYS[1] else 0.0)


class IngestingClient:
    """One training loop: logs both keys at every step until told to stop."""

    def __init__(self, index: int, api_url: str, run_id: int) -> None:
        self.index = index
        self.run_id = run_id
        self.steps = 0
        self.shipper = MetricShipper(
            CrucibleClient(api_url, ADMIN_TOKEN, timeout=10.0),
            run_id,
            max_buffered_points=1_000_000,
            batch_points=250,
            flush_interval=0.2,
            max_backoff=2.0,
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"client-{index}", daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            step = self.steps
            self.shipper.add({key: value_of(self.index, key, step) for key in KEYS}, step)
            self.steps += 1
            time.sleep(0.01)


def points_stored(database_url: str) -> int:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        count = stored_point_count(connection)
    engine.dispose()
    return count


def wait_for_more_points(database_url: str, more_than: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while (count := points_stored(database_url)) <= more_than:
        assert time.monotonic() < deadline, f"ingestion stalled at {count} points"
        time.sleep(0.2)
    return count


def test_every_acknowledged_point_survives_two_api_kills_exactly_once(
    api_process: ApiProcess, tmp_path: Path
) -> None:
    database_url = api_process.env["CRUCIBLE_DATABASE_URL"]
    with CrucibleClient(api_process.url, ADMIN_TOKEN) as admin:
        admin.create_project_from(ProjectCreate(name="chaos"))
        run_ids = []
        for index in range(CLIENTS):
            manifest = training_run(name=f"ingest-{index}")
            run = admin.submit_run(
                RunSubmit.model_validate({"project": "chaos", "manifest": manifest})
            )
            admin.start_attempt(run.id, AttemptStart())
            run_ids.append(run.id)

    clients = [IngestingClient(i, api_process.url, run_ids[i]) for i in range(CLIENTS)]
    for client in clients:
        client.thread.start()
    try:
        seen = wait_for_more_points(database_url, 2_000)
        for _ in range(2):
            api_process.kill()  # mid-ingest: batches are in flight from eight clients
            api_process.start()
            seen = wait_for_more_points(database_url, seen + 2_000)
    finally:
        for client in clients:
            client.stop.set()
            client.thread.join(10)
        flushed = [client.shipper.close(timeout=180) for client in clients]

    assert all(flushed), "a client could not deliver its points after the API came back"
    assert [c.shipper.dropped_points for c in clients] == [0] * CLIENTS
    logged = {c.run_id: c.steps for c in clients}
    acknowledged = sum(c.shipper.sent_points for c in clients)
    assert acknowledged == len(KEYS) * sum(logged.values())

    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = stored_points(connection)
        counters = connection.execute(
            text("SELECT run_id, key, point_count FROM metric_series")
        ).all()
    engine.dispose()

    found = {(run_id, key, step): value for run_id, key, step, value in rows}
    assert len(found) == len(rows), "a (run, key, step) is stored twice"
    index_of = {run_id: i for i, run_id in enumerate(run_ids)}
    expected = {
        (run_id, key, step): value_of(index_of[run_id], key, step)
        for run_id, steps in logged.items()
        for key in KEYS
        for step in range(steps)
    }
    assert found.keys() == expected.keys()
    assert found == expected
    for run_id, key, counted in counters:
        assert counted == logged[run_id], (run_id, key)
    (tmp_path / "figures.txt").write_text(
        f"clients={CLIENTS} points={len(rows)} acknowledged={acknowledged} kills=2\n"
    )
    print(f"\nfault 1: {CLIENTS} clients, {acknowledged} points acknowledged, {len(rows)} found")
