"""Prometheus metrics of the workers (served by /metrics in the embedded mode, and by the
worker's own exporter under Celery)."""

from prometheus_client import Counter, Histogram

from crucible.process_metrics import REGISTRY

MESSAGES = Counter(
    "crucible_worker_messages_total",
    "Outbox messages handled, by topic and outcome (handled, duplicate, error).",
    ["topic", "outcome"],
    registry=REGISTRY,
)
HANDLE_LATENCY = Histogram(
    "crucible_outbox_handle_latency_seconds",
    "From the state change's commit to its follow-up done: for checkpoint.registered this is "
    "the eval-trigger latency, for attempt.ended the recovery decision latency.",
    ["topic"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
