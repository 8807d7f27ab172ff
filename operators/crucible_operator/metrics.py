"""The operator's Prometheus metrics, on its own port (`crucible operator --metrics-port`)."""

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class _RunsByPhase(Collector):
    def __init__(self, phases: dict[str, tuple[str, str]]) -> None:
        self._phases = phases  # uid -> (kind, phase)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "crucible_operator_runs",
            "Custom resources the operator tracks, by kind and phase.",
            labels=["kind", "phase"],
        )
        counts: dict[tuple[str, str], int] = {}
        for key in list(self._phases.values()):
            counts[key] = counts.get(key, 0) + 1
        for (kind, phase), count in sorted(counts.items()):
            family.add_metric([kind, phase], count)
        yield family


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconcile_seconds = Histogram(
            "crucible_operator_reconcile_seconds",
            "Duration of one reconcile pass of one resource.",
            ["kind"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.reconcile_errors = Counter(
            "crucible_operator_reconcile_errors_total",
            "Reconcile passes that failed and were retried.",
            ["kind"],
            registry=self.registry,
        )
        self.pods_created = Counter(
            "crucible_operator_pods_created_total",
            "Pods created for attempts.",
            ["kind"],
            registry=self.registry,
        )
        self.attempt_ends = Counter(
            "crucible_operator_attempt_ends_total",
            "Attempts ended, by the reason the operator classified.",
            ["kind", "reason"],
            registry=self.registry,
        )
        self.control_plane_calls = Counter(
            "crucible_operator_control_plane_calls_total",
            "Calls to the control plane's API from the reconcile loops, by client method.",
            ["call"],
            registry=self.registry,
        )
        self.phases: dict[str, tuple[str, str]] = {}
        self.registry.register(_RunsByPhase(self.phases))
