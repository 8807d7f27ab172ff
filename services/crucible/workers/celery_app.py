"""`crucible worker`: the handlers and sweeps as Celery tasks over a Redis broker.

The relay runs as a beat task every second; handlers are `acks_late`, so a task whose worker
died unacknowledged goes back to the queue after the broker's visibility timeout, and the
relay republishes anything still unhandled after `relay_republish_after_seconds`, then after
ever longer waits (a lost broker, a killed worker). The handlers' exactly-once mark makes
all of that redelivery safe.

The beat's ticks (relay, sweeps) have a queue of their own and expire: behind a backlog of
handler messages in one queue they waited for minutes, recovery's sweep with them, and
piled up by the thousand (docs/scaling.md). A tick that expired is dropped; the next one
does the same work.
"""

from datetime import timedelta
from functools import cache
from typing import Any

from celery import Celery
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from crucible.core import storage_check
from crucible.db.engine import build_engine, build_session_factory
from crucible.domain.errors import CrucibleError
from crucible.settings import Settings, load_settings
from crucible.workers import handlers, relay, sweeps

HANDLE_TASK = "crucible.handle_outbox_message"
HANDLER_QUEUE = "crucible"
TICK_QUEUE = "crucible-ticks"


def _tick(task: str, seconds: float) -> dict[str, Any]:
    """A beat entry every `seconds`, on the tick queue, dropped when not started in time."""
    return {
        "task": task,
        "schedule": seconds,
        "options": {"queue": TICK_QUEUE, "expires": max(seconds, 10.0)},
    }


def create_celery(settings: Settings | None = None) -> Celery:
    settings = settings or load_settings()
    if not settings.broker_url:
        raise CrucibleError(
            "CRUCIBLE_BROKER_URL is not set; point it at Redis, e.g. redis://127.0.0.1:6379/0 "
            "(`scripts/services env` prints it for the test services)"
        )
    app = Celery("crucible", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=HANDLER_QUEUE,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": settings.broker_visibility_timeout_seconds},
        worker_hijack_root_logger=False,
        beat_schedule={
            "relay-outbox": _tick("crucible.relay_outbox", 1.0),
            "promote-recovering": _tick("crucible.promote_recovering", 1.0),
            "expire-silent-attempts": _tick("crucible.expire_silent_attempts", 10.0),
            "retire-checkpoints": _tick("crucible.retire_checkpoints", 30.0),
            "repair-drift": _tick("crucible.repair_drift", 30.0),
            "advance-sweeps": _tick("crucible.advance_sweeps", 5.0),
        },
    )
    _register_tasks(app, settings)
    return app


def _register_tasks(app: Celery, settings: Settings) -> None:
    @cache
    def factory() -> sessionmaker[Session]:
        # Built lazily in each worker process: an engine must not cross a fork.
        made = build_session_factory(build_engine(settings))
        made.configure(info=storage_check.session_info(settings))
        return made

    @app.task(  # type: ignore[untyped-decorator]
        name=HANDLE_TASK,
        autoretry_for=(OperationalError,),
        retry_backoff=True,
        retry_backoff_max=60,
        max_retries=None,
    )
    def handle_outbox_message(message_id: int) -> str:
        return handlers.handle_message(factory(), message_id)

    def publish(message_id: int, topic: str) -> None:
        handle_outbox_message.apply_async(args=[message_id], headers={"topic": topic})

    republish_after = timedelta(seconds=settings.relay_republish_after_seconds)

    @app.task(name="crucible.relay_outbox")  # type: ignore[untyped-decorator]
    def relay_outbox() -> int:
        return relay.relay_once(factory(), publish, republish_after=republish_after)

    @app.task(name="crucible.promote_recovering")  # type: ignore[untyped-decorator]
    def promote_recovering() -> list[int]:
        return sweeps.promote_recovering(factory())

    @app.task(name="crucible.expire_silent_attempts")  # type: ignore[untyped-decorator]
    def expire_silent_attempts() -> list[int]:
        return sweeps.expire_silent_attempts(factory())

    @app.task(name="crucible.retire_checkpoints")  # type: ignore[untyped-decorator]
    def retire_checkpoints() -> int:
        return sweeps.retire_checkpoints(factory())

    @app.task(name="crucible.advance_sweeps")  # type: ignore[untyped-decorator]
    def advance_sweeps() -> int:
        return sweeps.advance_sweeps(factory())

    @app.task(name="crucible.repair_drift")  # type: ignore[untyped-decorator]
    def repair_drift() -> list[int]:
        return sweeps.repair_drift(factory(), settle_seconds=settings.drift_settle_seconds)


def run_worker(
    settings: Settings, *, concurrency: int, beat: bool, metrics_port: int | None
) -> None:
    """Start a worker in this process (with the beat scheduler embedded when `beat`)."""
    app = create_celery(settings)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        from crucible.process_metrics import REGISTRY

        start_http_server(metrics_port, registry=REGISTRY)
    options: dict[str, Any] = {
        "concurrency": concurrency,
        "pool": "threads",
        "beat": beat,
        "loglevel": "INFO",
        # Polled in turn, so ticks run between handler messages, however many are queued.
        "queues": [TICK_QUEUE, HANDLER_QUEUE],
    }
    if beat:
        options["schedule_filename"] = str(settings.home / "celerybeat-schedule")
        settings.home.mkdir(parents=True, exist_ok=True)
    app.Worker(**options).start()
