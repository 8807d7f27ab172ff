"""GPU telemetry's pure parts: the metrics of a reading, which GPUs CUDA_VISIBLE_DEVICES
leaves, the busy share of a window; and that a machine without a GPU says why. NVML
itself is read on the GPU machine (benchmarks/gpu/telemetry_bench.py)."""

import pytest

from crucible.sdk.gpu_telemetry import GpuReading, NvmlGpus, as_metrics, busy_share, visible_indices

UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333"]


def _reading(index: int, utilization: float) -> GpuReading:
    return GpuReading(
        index=index,
        utilization=utilization,
        memory_used_gb=20.0,
        memory_total_gb=80.0,
        power_w=350.0,
        sm_clock_mhz=1980.0,
        memory_clock_mhz=2619.0,
        temperature_c=55.0,
    )


def test_a_reading_becomes_per_gpu_metrics_and_a_mean_utilization() -> None:
    metrics = as_metrics([_reading(0, 100.0), _reading(3, 40.0)])
    assert metrics["system/gpu0/utilization"] == 100.0
    assert metrics["system/gpu3/utilization"] == 40.0
    assert metrics["system/gpu3/memory_used_share"] == 0.25
    assert metrics["system/gpu0/power_w"] == 350.0
    assert metrics["system/gpu/utilization"] == 70.0
    assert not any(key.startswith("system/gpu1/") for key in metrics)


def test_no_reading_gives_no_metrics() -> None:
    assert as_metrics([]) == {}


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        (None, [0, 1, 2]),
        ("2,0", [2, 0]),
        ("1", [1]),
        ("", []),
        ("GPU-cccc", [2]),
        ("GPU-bbbb-2222,0", [1, 0]),
        ("0,7,1", [0]),  # CUDA ignores every entry after one it cannot resolve
        ("GPU-", []),  # a prefix of every UUID names none of them
        ("MIG-4f0a", []),
        ("1,1", [1]),
    ],
)
def test_the_gpus_cuda_may_use_are_the_ones_read(variable: str | None, expected: list[int]) -> None:
    assert visible_indices(variable, UUIDS) == expected


def test_the_busy_share_is_the_mean_utilization_inside_the_window() -> None:
    samples = [(0.0, 100.0), (1.0, 50.0), (2.0, 0.0), (3.0, 100.0)]
    assert busy_share(samples, 1.0, 2.0) == 0.25
    assert busy_share(samples, 0.0, 3.0) == 0.625
    assert busy_share(samples, 5.0, 6.0) is None


def test_a_machine_without_a_gpu_is_told_why_there_is_no_telemetry() -> None:
    gpus = NvmlGpus.open(None)
    assert isinstance(gpus, str), "this test expects the CI machine to have no NVIDIA GPU"
    assert "NVML" in gpus or "nvidia-ml-py" in gpus
