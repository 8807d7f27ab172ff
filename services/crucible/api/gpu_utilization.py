"""The latest value of a run metric, for each run that reported one lately, exported as a
gauge labelled by run that an alert of the chart watches: the mean GPU utilization
(`crucible_run_gpu_utilization_percent`, CrucibleRunGpuIdle) and a low-precision run's worst
saturation (`crucible_run_numerics_saturated_share`, CrucibleRunNumericsSaturating).

The run SDK logs `system/gpu/utilization` as an ordinary metric (`sdk/gpu_telemetry.py`),
and the trainer `precision/saturated_max` (`training/precision/apply.py`); the metrics route
hands each batch the API accepted to every `LatestRunValue.record`. The table lives in this
process only: each API replica exports the batches it received, and the alert takes the
max over replicas. A value is exported for `FRESH_SECONDS` after it arrived, so a run that
ended, or stopped reporting, loses its series instead of reading as idle.
"""

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from crucible.domain.metric_keys import NUMERICS_SATURATED_MAX
from crucible.schemas.metrics import MetricBatch
from crucible.sdk.gpu_telemetry import METRIC_PREFIX

GPU_UTILIZATION_KEY = f"{METRIC_PREFIX}/utilization"
# Long enough to span a few of the SDK's readings and a late scrape, short enough that a
# run which ended drops out of the alert's view within a couple of minutes.
FRESH_SECONDS = 120.0


class LatestRunValue(Collector):
    """Run id -> (the metric's latest value, when it arrived), thread-safe: batches arrive
    on the server's worker threads while a scrape reads. `clock` is seconds from any fixed
    origin."""

    def __init__(
        self,
        key: str,
        gauge: str,
        description: str,
        *,
        fresh_for: float = FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key
        self._gauge = gauge
        self._description = description
        self._fresh_for = fresh_for
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[int, tuple[float, float]] = {}
        self._pruned_at = clock()

    def record(self, run_id: int, batch: MetricBatch) -> None:
        """Remember the batch's value of the key, if it has one, as the run's latest."""
        value = latest_value(batch, self.key)
        if value is None:
            return
        now = self._clock()
        with self._lock:
            self._latest[run_id] = (value, now)
            # Without a scraper nothing else would ever forget a run.
            if now - self._pruned_at >= self._fresh_for:
                self._forget_stale(now)

    def fresh(self) -> dict[int, float]:
        """Run id -> value, of the values that arrived within `fresh_for`; the older ones
        are forgotten."""
        now = self._clock()
        with self._lock:
            self._forget_stale(now)
            return {run_id: value for run_id, (value, _) in self._latest.items()}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Labelled by run only: the project's name is not at hand when a batch arrives, and
        # looking it up would cost a query per batch.
        gauge = GaugeMetricFamily(self._gauge, self._description, labels=["run"])
        for run_id, value in sorted(self.fresh().items()):
            gauge.add_metric([str(run_id)], value)
        yield gauge

    def _forget_stale(self, now: float) -> None:
        cutoff = now - self._fresh_for
        self._latest = {
            run_id: entry for run_id, entry in self._latest.items() if entry[1] >= cutoff
        }
        self._pruned_at = now


def gpu_utilization(**options: Any) -> LatestRunValue:
    return LatestRunValue(
        GPU_UTILIZATION_KEY,
        "crucible_run_gpu_utilization_percent",
        "Mean GPU utilization (percent of time a kernel ran) a live run last reported to this "
        "API replica.",
        **options,
    )


def numerics_saturation(**options: Any) -> LatestRunValue:
    return LatestRunValue(
        NUMERICS_SATURATED_MAX,
        "crucible_run_numerics_saturated_share",
        "The largest share of a quantized operand's values its format's maximum clipped, "
        "over a low-precision run's layers, as the run last reported it to this API replica.",
        **options,
    )


def latest_value(batch: MetricBatch, key: str) -> float | None:
    """The value of `key` at the batch's highest step for it, or None when the batch lacks
    the key. On a tie the later point in the batch wins, unlike storage (first wins): the
    SDK logs GPU readings at the latest training step, so a hung run sends every new reading
    at the same step, and the newest is the one that says whether the GPUs still work."""
    best_step = -1
    best: float | None = None
    for point in batch.points:
        if point["key"] == key and point["step"] >= best_step:
            best_step, best = point["step"], point["value"]
    for row in batch.rows:
        value = row["values"].get(key)
        if value is not None and row["step"] >= best_step:
            best_step, best = row["step"], value
    for group in batch.columns:
        if key not in group.keys:
            continue
        width = len(group.keys)
        for step, value in zip(
            group.steps, group.values[group.keys.index(key) :: width], strict=True
        ):
            if step >= best_step:
                best_step, best = step, value
    return best
