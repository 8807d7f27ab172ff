"""Prometheus metrics of the serving engine, on a registry owned by the app (not global).

Queue, batch and KV-cache sizes and the token counters are read from `engine.stats()` at
scrape time; latencies are observed by the server as each request's tokens arrive
(`RequestTimer`).
"""

import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from crucible.engine.async_engine import AsyncEngine
from crucible.engine.sequence import FinishReason

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_REQUEST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class EngineMetrics:
    def __init__(self, engine: AsyncEngine) -> None:
        self.registry = CollectorRegistry()
        self.time_to_first_token = Histogram(
            "crucible_engine_time_to_first_token_seconds",
            "From a request's arrival to its first generated token (queueing and prefill).",
            registry=self.registry,
            buckets=_TTFT_BUCKETS,
        )
        self.inter_token_latency = Histogram(
            "crucible_engine_inter_token_latency_seconds",
            "Between consecutive tokens of one completion.",
            registry=self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        self.request_duration = Histogram(
            "crucible_engine_request_seconds",
            "From a request's arrival to its last token, or to the client going away.",
            registry=self.registry,
            buckets=_REQUEST_BUCKETS,
        )
        self.completions = Counter(
            "crucible_engine_completions",
            "Completions ended, by finish_reason (a request with n choices counts n; "
            "abort is a client that went away before the end).",
            ["finish_reason"],
            registry=self.registry,
        )
        for reason in FinishReason:  # every series exists from the first scrape
            self.completions.labels(reason.value)
        self.registry.register(_EngineStateCollector(engine))

    def timer(self) -> "RequestTimer":
        """A timer for a request arriving now."""
        return RequestTimer(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """Times one request's tokens into the histograms, and counts how its choices ended."""

    def __init__(self, metrics: EngineMetrics) -> None:
        self.metrics = metrics
        self.started = time.perf_counter()
        self.first_token = False
        self.last_token: dict[int, float] = {}
        """When each choice's latest token came."""

    def token(self, choice: int) -> None:
        now = time.perf_counter()
        if not self.first_token:
            self.first_token = True
            self.metrics.time_to_first_token.observe(now - self.started)
        previous = self.last_token.get(choice)
        if previous is not None:
            self.metrics.inter_token_latency.observe(now - previous)
        self.last_token[choice] = now

    def finished(self, reasons: Sequence[str | None]) -> None:
        """The request is over; a choice without a finish reason was cut short (aborted)."""
        self.metrics.request_duration.observe(time.perf_counter() - self.started)
        for reason in reasons:
            self.metrics.completions.labels(reason or FinishReason.ABORT.value).inc()


class _EngineStateCollector(Collector):
    """Read at scrape time, so the numbers are the engine's own, never a stale copy."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.stats()
        gauges = (
            ("waiting_sequences", "Sequences queued for their prefill.", stats.waiting),
            ("running_sequences", "Sequences decoding.", stats.running),
            ("kv_blocks_used", "KV-cache blocks held by sequences.", stats.blocks_used),
            ("kv_blocks_total", "KV-cache blocks in the pool.", stats.blocks_total),
        )
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(f"crucible_engine_{name}", documentation)
            gauge.add_metric([], float(value))
            yield gauge
        counters = stats.counters
        totals = (
            (
                "prompt_tokens",
                "Prompt tokens computed (those found in cached prefix blocks are not); "
                "rate() of it is the prefill throughput in tokens/s.",
                counters.prompt_tokens,
            ),
            (
                "generation_tokens",
                "Tokens generated; rate() of it is the decode throughput in tokens/s.",
                counters.generated_tokens,
            ),
            (
                "preemptions",
                "Sequences pushed back to the queue to free KV blocks (recomputed later).",
                counters.preemptions,
            ),
        )
        for name, documentation, value in totals:
            counter = CounterMetricFamily(f"crucible_engine_{name}", documentation)
            counter.add_metric([], float(value))
            yield counter
