"""GPU telemetry through NVML (the `nvidia-ml-py` package, module `pynvml`): what each GPU
the process may use is doing, read by a background thread and logged as the run's system
metrics.

NVML reports per physical GPU and ignores CUDA_VISIBLE_DEVICES, so the GPUs are chosen
from that variable the way CUDA reads it (indices or UUID prefixes); in a Kubernetes pod
the device plugin shows the container only its own GPUs, and all of them are the run's.
Reading a GPU is a handful of driver calls, microseconds each; the thread holds the GIL
for little more than building the dict it logs.

Utilization is NVML's: the share of the driver's last sample period (1/6 s to 1 s by
product) in which at least one kernel ran. It says the GPU was busy, not how much of it
was: a single small kernel reads as 100%. MFU (`training/flops.py`) says the rest.
"""

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

METRIC_PREFIX = "system/gpu"


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment."""

    index: int
    """NVML's index of the GPU (PCI bus order), not CUDA's."""
    utilization: float
    """Percent of the last sample period in which a kernel ran."""
    memory_used_gb: float
    memory_total_gb: float
    power_w: float
    sm_clock_mhz: float
    memory_clock_mhz: float
    temperature_c: float


def as_metrics(readings: Sequence[GpuReading]) -> dict[str, float]:
    """System metrics of one reading of every GPU: `system/gpu<i>/<name>` per GPU, and
    `system/gpu/utilization`, the mean over them, which the idle-GPU alert watches."""
    metrics: dict[str, float] = {}
    for reading in readings:
        prefix = f"{METRIC_PREFIX}{reading.index}/"
        metrics[prefix + "utilization"] = reading.utilization
        metrics[prefix + "memory_used_gb"] = reading.memory_used_gb
        metrics[prefix + "memory_used_share"] = (
            reading.memory_used_gb / reading.memory_total_gb if reading.memory_total_gb else 0.0
        )
        metrics[prefix + "power_w"] = reading.power_w
        metrics[prefix + "sm_clock_mhz"] = reading.sm_clock_mhz
        metrics[prefix + "memory_clock_mhz"] = reading.memory_clock_mhz
        metrics[prefix + "temperature_c"] = reading.temperature_c
    if readings:
        metrics[f"{METRIC_PREFIX}/utilization"] = sum(r.utilization for r in readings) / len(
            readings
        )
    return metrics


def visible_indices(cuda_visible_devices: str | None, uuids: Sequence[str]) -> list[int]:
    """The NVML indices of the GPUs a CUDA process may use, given CUDA_VISIBLE_DEVICES and
    every GPU's UUID in NVML order. Unset means all; CUDA stops at the first entry it cannot
    resolve, and so does this (a MIG instance's UUID names no GPU here, so it stops there)."""
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if entry.isdigit():
            index = int(entry)
            if index >= len(uuids):
                break
        else:
            matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        if index not in chosen:
            chosen.append(index)
    return chosen


def busy_share(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """The mean utilization (0 to 1) of the samples `(time, percent)` taken in [start, end],
    or None when none was; one minus it is the GPU's idle share over the window."""
    inside = [percent for at, percent in samples if start <= at <= end]
    return sum(inside) / len(inside) / 100.0 if inside else None


class NvmlGpus:
    """Open NVML handles of the GPUs this process may use. `open()` answers why not when
    there are none to read."""

    def __init__(self, nvml: Any, handles: list[tuple[int, Any]]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls, cuda_visible_devices: str | None) -> "NvmlGpus | str":
        """The GPUs, or the reason there are none: no pynvml, no driver, no GPU."""
        try:
            import pynvml
        except ImportError:
            return "the nvidia-ml-py package is not installed"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return f"NVML did not start ({exc}): no NVIDIA driver here"
        try:
            count = pynvml.nvmlDeviceGetCount()
            all_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(pynvml.nvmlDeviceGetUUID(handle)) for handle in all_handles]
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            return f"NVML could not list the GPUs ({exc})"
        indices = visible_indices(cuda_visible_devices, uuids)
        if not indices:
            pynvml.nvmlShutdown()
            return (
                f"no GPU visible (NVML sees {count}, CUDA_VISIBLE_DEVICES={cuda_visible_devices!r})"
            )
        return cls(pynvml, [(i, all_handles[i]) for i in indices])

    @property
    def indices(self) -> list[int]:
        return [index for index, _ in self._handles]

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        readings = []
        for index, handle in self._handles:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append(
                GpuReading(
                    index=index,
                    utilization=float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                    memory_used_gb=memory.used / 1e9,
                    memory_total_gb=memory.total / 1e9,
                    power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    sm_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                    memory_clock_mhz=float(
                        nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
                    ),
                    temperature_c=float(
                        nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                    ),
                )
            )
        return readings

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class GpuSampler:
    """Reads `gpus` every `interval` seconds on a daemon thread and hands each reading to
    `sink`. A read that fails (a GPU fallen off the bus) is logged once and the thread
    stops: telemetry never fails the run."""

    def __init__(
        self,
        gpus: NvmlGpus,
        interval: float,
        sink: Callable[[list[GpuReading]], None],
    ) -> None:
        self._gpus = gpus
        self._interval = interval
        self._sink = sink
        self._stopped = threading.Event()
        self.reads = 0
        self._thread = threading.Thread(
            target=self._run, name="crucible-gpu-telemetry", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stopped.is_set():
            try:
                readings = self._gpus.read()
            except Exception as exc:  # NVMLError and kin: a driver fault is not the run's
                log.warning("GPU telemetry stopped: reading NVML failed: %s", exc)
                return
            self.reads += 1
            self._sink(readings)
            next_at += self._interval
            self._stopped.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._gpus.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
