"""Prometheus metrics for the API process, on a registry owned by the app (not global)."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crucible.api.gpu_utilization import gpu_utilization, numerics_saturation
from crucible.db.tables import OutboxMessage, Run


class ApiMetrics:
    def __init__(self, engine: Engine, session_factory: sessionmaker[Session]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "crucible_http_requests_total",
            "HTTP requests by route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "crucible_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.points_ingested = Counter(
            "crucible_metric_points_ingested_total",
            "Metric points accepted (new, not dupes).",
            registry=self.registry,
        )
        self.registry.register(_StateCollector(engine, session_factory))
        self.gpu_utilization = gpu_utilization()
        self.numerics_saturation = numerics_saturation()
        self.latest_run_values = (self.gpu_utilization, self.numerics_saturation)
        for table in self.latest_run_values:
            self.registry.register(table)


class _StateCollector(Collector):
    """Read at scrape time, so the numbers are the database's, whichever replica is asked."""

    def __init__(self, engine: Engine, session_factory: sessionmaker[Session]) -> None:
        self.engine = engine
        self.session_factory = session_factory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pool = self.engine.pool
        in_use = GaugeMetricFamily(
            "crucible_db_pool_connections_in_use", "Database connections checked out of the pool."
        )
        in_use.add_metric([], float(getattr(pool, "checkedout", lambda: 0)()))
        yield in_use
        by_phase = GaugeMetricFamily("crucible_runs", "Runs by phase.", labels=["phase"])
        lag = GaugeMetricFamily(
            "crucible_outbox_lag_seconds",
            "Age of the oldest outbox message no worker has handled yet (0 when drained).",
        )
        try:
            with self.session_factory() as session:
                rows = session.execute(select(Run.phase, func.count()).group_by(Run.phase))
                for phase, count in rows:
                    by_phase.add_metric([phase], float(count))
                oldest = session.scalar(
                    select(func.min(OutboxMessage.created_at)).where(
                        OutboxMessage.handled_at.is_(None)
                    )
                )
                lag.add_metric([], _age_seconds(oldest))
        except Exception:  # noqa: S110 - a scrape must not fail because the DB is down
            pass
        yield by_phase
        yield lag


def _age_seconds(moment: datetime | None) -> float:
    if moment is None:
        return 0.0
    if moment.tzinfo is None:  # SQLite's MIN() hands back a naive UTC datetime (or text)
        moment = moment.replace(tzinfo=UTC)
    return max((datetime.now(UTC) - moment).total_seconds(), 0.0)


class RequestMetrics:
    """ASGI middleware: count and time requests by route template, not raw path (bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            method, route = scope["method"], _route_template(scope)
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)


def _route_template(scope: Scope) -> str:
    """The matched route's template (`/api/v1/runs/{run_id}`), set in the scope by routing."""
    route = scope.get("route")
    return str(getattr(route, "path_format", None) or getattr(route, "path", "unmatched"))
