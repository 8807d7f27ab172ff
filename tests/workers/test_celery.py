"""Fault 3 for real: `crucible worker` (Celery) on a Redis of this test's own that keeps
nothing on disk, Postgres, and the API in this process.

Each test runs four waves of work. The first goes through undisturbed. In the second the
worker is SIGKILLed while it holds every unhandled message in a handler, inside its
transaction (taken from Redis, not acknowledged, not committed): Redis gives the messages
to the next worker (acks_late), which handles them. In the third the handlers commit while
Redis takes no writes, and the worker is SIGKILLed before any acknowledgement gets through:
the next worker gets the messages again and must refuse them. In the fourth the worker is
SIGKILLed before the commit with more messages queued behind, and Redis is restarted,
losing every one of them; only the outbox can bring them back. Afterwards every committed
outbox row has been handled exactly once (the worker logs each handling with its row's
id), and so each checkpoint has one EvalJob and each interruption one recovery decision.

Handlers are caught in flight by a SHARE lock held by the test on the table their first
write goes to: reads go on (the relay publishes, the API answers) while the handlers wait in
the middle of their transaction. The eval trigger's first write inserts into `runs`; the
recovery follow-up, whose decision the API already took, first writes the chosen
checkpoint's `CheckpointVerified` event into `run_events` (the run's other message waits
behind it on the run's row lock).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine, select, text

from crucible.db.tables import OutboxMessage
from crucible.settings import Settings
from crucible.workers.celery_app import HANDLE_TASK
from crucible.workers.relay import republish_wait
from tests.api.test_checkpoints_datasets import API, register_checkpoint, submit_kind
from tests.conftest import make_project, postgres_only
from tests.outbox_probe import Copy, handler_copies
from tests.servers import free_port
from tests.workers.test_handlers import end_badly, run_of, running

pytestmark = [pytest.mark.redis, pytest.mark.slow, postgres_only]

CONCURRENCY = 4
REPUBLISH_AFTER = timedelta(seconds=2)
# kombu gives back deliveries older than this as a worker starts consuming, and then only
# every 100 s: a worker never hands back one it still holds within this test's waits.
VISIBILITY_TIMEOUT = timedelta(seconds=4)
# A worker process imports Celery, SQLAlchemy and the handlers before it consumes anything.
STARTUP = timedelta(seconds=60)

T = TypeVar("T")


class Broker:
    """redis-server on a free port, without RDB or AOF: stopped, it has lost all it held."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = workdir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [
                    *("redis-server", "--bind", "127.0.0.1", "--port", str(self.port)),
                    *("--save", "", "--appendonly", "no", "--dir", str(self.dir)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                with self.client() as client:
                    client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    pytest.fail(f"redis-server did not start:\n{self.log.read_text()}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self) -> None:
        """SHUTDOWN NOSAVE and start again: with nothing on disk, it comes back empty."""
        with self.client() as client:
            client.shutdown(nosave=True)
        assert self.process is not None
        self.process.wait(15)
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def pause_writes(self) -> None:
        """Hold every client's writes (a worker's acknowledgements, its BRPOPs, beat's
        publishes) until `unpause`; reads still answer."""
        with self.client() as client:
            client.client_pause(60_000, all=False)

    def unpause(self) -> None:
        with self.client() as client:
            client.client_unpause()

    def key_count(self) -> int:
        with self.client() as client:
            return int(client.dbsize())

    def handler_copies(self) -> list[Copy]:
        with self.client() as client:
            return handler_copies(client)


class Worker:
    """`crucible worker` in its own process group, logging to one file over its lives."""

    def __init__(self, settings: Settings, broker_url: str, home: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        self.env |= {
            "CRUCIBLE_DATABASE_URL": str(settings.database_url),
            "CRUCIBLE_BROKER_URL": broker_url,
            "CRUCIBLE_HOME": str(home),
            # The API's storage roots: recovery retires a checkpoint outside them unread, so
            # a worker without them would call every test checkpoint OutsideProjectStorage.
            "CRUCIBLE_STORAGE_ROOTS": json.dumps(settings.storage_roots),
            "CRUCIBLE_RELAY_REPUBLISH_AFTER_SECONDS": str(REPUBLISH_AFTER.total_seconds()),
            "CRUCIBLE_BROKER_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT.total_seconds()),
        }
        home.mkdir(parents=True, exist_ok=True)
        self.log = home / "worker.log"
        self.log.touch()
        self.process: subprocess.Popen[bytes] | None = None
        self._started_at = 0  # where in the log this life of the worker began

    def start(self) -> None:
        self._started_at = self.log.stat().st_size
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "crucible", "worker", "--concurrency", str(CONCURRENCY)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def text(self, *, this_life: bool = False) -> str:
        with self.log.open("rb") as log:
            log.seek(self._started_at if this_life else 0)
            return log.read().decode(errors="replace")

    def handled(self) -> Counter[int]:
        """How many times each outbox row's handler ran and committed."""
        found = re.findall(r"outbox message (\d+) \([\w.]+\) handled:", self.text())
        return Counter(int(i) for i in found)

    def already_handled(self) -> Counter[int]:
        found = re.findall(r"outbox message (\d+) \([\w.]+\): already handled", self.text())
        return Counter(int(i) for i in found)

    def received(self) -> set[str]:
        """Ids of the handler tasks this life of the worker took from Redis."""
        pattern = rf"Task {re.escape(HANDLE_TASK)}\[([0-9a-f-]+)\] received"
        return set(re.findall(pattern, self.text(this_life=True)))


@dataclass(frozen=True)
class Row:
    id: int
    topic: str
    sent_at: datetime | None
    publish_attempts: int
    handled_at: datetime | None


class Outbox:
    """The outbox table and the table locks that hold handlers, from a connection of the
    test's own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def rows(self) -> list[Row]:
        query = select(
            OutboxMessage.id,
            OutboxMessage.topic,
            OutboxMessage.sent_at,
            OutboxMessage.publish_attempts,
            OutboxMessage.handled_at,
        ).order_by(OutboxMessage.id)
        with self.engine.connect() as connection:
            return [Row(*r) for r in connection.execute(query)]

    def unhandled(self) -> list[Row]:
        return [r for r in self.rows() if r.handled_at is None]

    @contextmanager
    def writes_held(self, table: str) -> Iterator[Connection]:
        """Hold a SHARE lock on `table`: every write to it waits until the block ends."""
        with self.engine.connect() as connection:
            connection.execute(text(f"LOCK TABLE {table} IN SHARE MODE"))
            try:
                yield connection
            finally:
                connection.rollback()

    def waiting_backends(self) -> set[int]:
        """Backends of this database waiting for a lock (the held handlers)."""
        query = text(
            "SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        with self.engine.connect() as connection:
            return set(connection.scalars(query))

    def terminate(self, pids: set[int]) -> None:
        # Postgres notices a dead client only when it next talks to it: a backend waiting on
        # a lock would keep its outbox row locked, and the relay (SKIP LOCKED) from it.
        with self.engine.connect() as connection:
            for pid in pids:
                connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


class Fault:
    """The worker, its broker and the outbox, and the two ways this test hurts them."""

    def __init__(self, worker: Worker, broker: Broker, outbox: Outbox, held_table: str) -> None:
        self.worker, self.broker, self.outbox = worker, broker, outbox
        self.held_table = held_table  # where the handlers under test write first
        self.seen: list[str] = []  # what each wave did, for docs/reliability.md

    def wait(self, what: str, check: Callable[[], T | None], until: datetime) -> T:
        while True:
            found = check()
            if found is not None and found is not False:
                return found
            if datetime.now(UTC) > until:
                log = self.worker.text()[-6000:]
                pytest.fail(f"timed out waiting for {what}; worker log (tail):\n{log}")
            time.sleep(0.2)

    def _start_caught(self) -> tuple[list[Copy], set[int]]:
        """Start the worker while the caller holds writes to runs, and wait until the
        messages it has taken are all of unhandled rows, each with a handler waiting on a
        lock, the same ones for a second. Returns those messages and the waiting backends."""
        self.worker.start()
        seen: list[tuple[set[str], float]] = []

        def caught() -> tuple[list[Copy], set[int]] | None:
            rows = self.outbox.rows()
            unhandled = {r.id for r in rows if r.handled_at is None}
            if any(r.sent_at is None for r in rows):
                return None  # the relay has not published everything yet
            copies = [c for c in self.broker.handler_copies() if c.where == "taken"]
            waiting = self.outbox.waiting_backends()
            tags = {c.delivery_tag for c in copies}
            held = copies and all(c.message_id in unhandled for c in copies)
            if not held or len(waiting) < len(copies):
                seen.clear()
                return None
            if not seen or seen[0][0] != tags:
                seen[:] = [(tags, time.monotonic())]
            return (copies, waiting) if time.monotonic() - seen[0][1] >= 1 else None

        return self.wait(
            "the worker's handlers to wait inside their transactions",
            caught,
            datetime.now(UTC) + STARTUP,
        )

    def _kill_before_commit(self) -> list[Copy]:
        with self.outbox.writes_held(self.held_table):
            taken, waiting = self._start_caught()
            self.worker.kill()
            self.outbox.terminate(waiting)
        return taken

    def _start_after_visibility_timeout(self, dead: list[Copy]) -> None:
        """Start the next worker once the dead one's messages are a visibility timeout old
        (kombu gives them back as a worker starts) and wait until it has taken them all."""
        time.sleep(VISIBILITY_TIMEOUT.total_seconds() + 1)
        self.worker.start()
        self.settle()
        missing = {c.task_id for c in dead} - self.worker.received()
        assert not missing, f"Redis never gave back {missing}"

    def kill_before_commit_then_redeliver(self) -> list[Copy]:
        """SIGKILL the worker while it holds every unhandled row in a handler, inside its
        transaction. Redis keeps the messages as taken and gives them to the next worker,
        which handles them. Returns the dead worker's messages."""
        taken = self._kill_before_commit()
        wave = {r.id for r in self.outbox.unhandled()}
        assert {c.message_id for c in taken} == wave, "a wave the worker takes whole"
        self._start_after_visibility_timeout(taken)
        self.seen.append(f"killed before the commit: {len(taken)} given back and handled")
        return taken

    def kill_after_commit_before_ack(self) -> list[Copy]:
        """Let the worker's held handlers commit while Redis takes no writes, so none can
        acknowledge its message, and SIGKILL it then: the rows are handled, and Redis still
        holds their messages as taken. The next worker gets them again and must refuse each.
        Returns those messages."""
        with self.outbox.writes_held(self.held_table):
            taken, _ = self._start_caught()
            self.broker.pause_writes()
        try:
            ids = {c.message_id for c in taken}
            self.wait(
                "the held handlers to commit",
                lambda: not ids & {r.id for r in self.outbox.unhandled()},
                datetime.now(UTC) + STARTUP,
            )
            self.worker.kill()
        finally:
            self.broker.unpause()
        still = {c.task_id for c in self.broker.handler_copies() if c.where == "taken"}
        assert {c.task_id for c in taken} <= still, "an acknowledgement reached Redis"
        self._start_after_visibility_timeout(taken)
        self.seen.append(f"killed after the commit: {len(taken)} given back and refused")
        return taken

    def kill_before_commit_then_lose_redis(self) -> list[Copy]:
        """SIGKILL the worker with its handlers in flight and more messages queued, then
        restart Redis, which comes back without any of them. Returns what it lost."""
        self._kill_before_commit()
        held = self.broker.handler_copies()
        unhandled = {r.id for r in self.outbox.unhandled()}
        assert {c.message_id for c in held} == unhandled, (held, unhandled)
        assert {c.where for c in held} == {"taken", "queued"}, held
        keys = self.broker.key_count()
        assert keys > 0
        self.broker.restart()
        assert self.broker.key_count() == 0, "Redis kept something across its restart"
        self.worker.start()
        taken = sum(c.where == "taken" for c in held)
        self.seen.append(
            f"Redis restarted holding {len(held)} ({taken} taken, {len(held) - taken} queued; "
            f"{keys} keys), 0 keys after"
        )
        return held

    def settle(self) -> None:
        """Wait until every committed row is handled and Redis holds no copy of any message
        (none queued, none taken): nothing is left that could be delivered again. The
        deadline is the relay's own: each unhandled row's next republish, plus a start."""
        started = datetime.now(UTC)
        calm_since: float | None = None

        def deadline() -> datetime:
            due = [
                r.sent_at + republish_wait(REPUBLISH_AFTER, r.publish_attempts)
                for r in self.outbox.unhandled()
                if r.sent_at is not None
            ]
            return max([started, *due]) + STARTUP

        while True:
            if not self.outbox.unhandled() and not self.broker.handler_copies():
                calm_since = calm_since or time.monotonic()
                if time.monotonic() - calm_since >= 1:
                    return
            else:
                calm_since = None
            if datetime.now(UTC) > deadline():
                pytest.fail(
                    f"not settled: unhandled {self.outbox.unhandled()}, in Redis "
                    f"{self.broker.handler_copies()}; worker log (tail):\n"
                    + self.worker.text()[-6000:]
                )
            time.sleep(0.2)

    def assert_each_row_handled_once(self, *, refused: list[Copy], lost: list[Copy]) -> None:
        rows = self.outbox.rows()
        assert all(r.handled_at is not None for r in rows)
        handled = self.worker.handled()
        assert {r.id: handled[r.id] for r in rows} == {r.id: 1 for r in rows}
        # What came again after its row was handled was refused, each time.
        duplicates = self.worker.already_handled()
        assert all(duplicates[c.message_id] >= 1 for c in refused), duplicates
        # What Redis lost came back from the outbox, republished; Redis never gave it back.
        attempts = {r.id: r.publish_attempts for r in rows}
        assert all(attempts[c.message_id] >= 2 for c in lost)
        assert not {c.task_id for c in lost} & self.worker.received()
        print(  # for docs/reliability.md (pytest -s shows this)
            f"\n{'; '.join(self.seen)}; {len(rows)} outbox rows, each handled once, "
            f"{sum(duplicates.values())} deliveries after the handling refused"
        )


@pytest.fixture
def fault(database_url: str, settings: Settings, tmp_path: Path) -> Iterator[Fault]:
    broker = Broker(tmp_path / "redis")
    broker.start()
    engine = create_engine(database_url)
    worker = Worker(settings, broker.url, tmp_path / "worker-home")
    yield Fault(worker, broker, Outbox(engine), held_table="runs")
    worker.kill()
    broker.stop()
    engine.dispose()


def eval_runs(admin: TestClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = admin.get(f"{API}/runs", params={"kind": "eval"}).json()["items"]
    return items


def test_one_eval_per_checkpoint_through_kills_in_flight_and_a_redis_that_lost_all(
    admin: TestClient, fault: Fault
) -> None:
    make_project(admin)
    run = submit_kind(
        admin,
        "TrainingRun",
        "sft",
        evals=[{"suite": "arithmetic"}],
        checkpoints={"keepLast": 100},  # retention must not retire one before its eval
    )
    steps = iter(range(100, 10_000, 100))

    def register(count: int) -> list[int]:
        return [register_checkpoint(admin, run["id"], next(steps))["id"] for _ in range(count)]

    fault.worker.start()
    checkpoints = register(1)
    fault.settle()
    fault.worker.kill()

    checkpoints += register(CONCURRENCY // 2)
    fault.kill_before_commit_then_redeliver()
    fault.worker.kill()

    checkpoints += register(CONCURRENCY // 2)
    refused = fault.kill_after_commit_before_ack()
    fault.worker.kill()

    checkpoints += register(2 * CONCURRENCY)
    lost = fault.kill_before_commit_then_lose_redis()
    fault.settle()

    fault.assert_each_row_handled_once(refused=refused, lost=lost)
    evaluated = sorted(r["manifest"]["spec"]["checkpoint"]["id"] for r in eval_runs(admin))
    assert evaluated == sorted(checkpoints)


def run_events_of(admin: TestClient, run_id: int, type: str) -> list[dict[str, Any]]:
    events = admin.get(f"{API}/runs/{run_id}/events").json()
    return [e for e in events if e["type"] == type]


def test_every_interruption_is_recovered_once_through_kills_in_flight_and_a_redis_that_lost_all(
    admin: TestClient, fault: Fault
) -> None:
    """18 runs preempted in four waves: 6 undisturbed; 1 and 1, both of whose messages the
    killed worker holds (before and after their commit); 10, whose 20 messages fill its
    threads and the queue behind when Redis loses them. Each interruption gets exactly one
    recovery decision, resuming from the run's checkpoint (taken by the API as it answered
    the report), and the digest check of that checkpoint is recorded once."""
    fault.held_table = "run_events"
    make_project(admin)
    runs = [
        submit_kind(admin, "TrainingRun", f"r{i}", recovery={"backoffSeconds": 0})
        for i in range(18)
    ]
    checkpoints: dict[int, int] = {}

    def preempt(wave: list[dict[str, Any]]) -> None:
        # Running only now: a run Running for minutes without heartbeats is the watchdog's.
        for run in wave:
            attempt = running(admin, run["id"])
            checkpoints[run["id"]] = register_checkpoint(admin, run["id"], 100)["id"]
            end_badly(admin, run["id"], attempt, "Preempted", 143)

    fault.worker.start()
    preempt(runs[:6])
    fault.settle()
    fault.worker.kill()

    preempt(runs[6:7])  # attempt.ended and run.interrupted: CONCURRENCY // 2 messages
    fault.kill_before_commit_then_redeliver()
    fault.worker.kill()

    preempt(runs[7:8])
    refused = fault.kill_after_commit_before_ack()
    fault.worker.kill()

    preempt(runs[8:])
    lost = fault.kill_before_commit_then_lose_redis()
    fault.settle()

    fault.assert_each_row_handled_once(refused=refused, lost=lost)
    for run in runs:
        decided = run_events_of(admin, run["id"], "RecoveryScheduled")
        assert len(decided) == 1, (run["name"], decided)
        verified = run_events_of(admin, run["id"], "CheckpointVerified")
        assert [e["data"]["checkpoint_id"] for e in verified] == [checkpoints[run["id"]]]
        assert decided[0]["data"]["resume_checkpoint_id"] == checkpoints[run["id"]]
        after = run_of(admin, run["id"])
        assert after["phase"] == "Scheduling"
        assert (after["next_attempt_reason"], after["attempt_count"]) == ("preemption", 1)
