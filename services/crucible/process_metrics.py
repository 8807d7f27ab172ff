"""Prometheus metrics that more than one kind of process counts: one registry, which the
API's /metrics and the worker's own exporter both serve."""

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry()

RECOVERIES = Counter(
    "crucible_recoveries_total",
    "Decisions after an attempt ended badly, by the attempt's end reason and the decision. "
    "Taken by the API when the backend's report completes the facts, else by a worker.",
    ["reason", "decision"],
    registry=REGISTRY,
)
