"""The latest `system/gpu/utilization` of each run, exported at /metrics as
`crucible_run_gpu_utilization_percent` for the chart's CrucibleRunGpuIdle alert, and a
low-precision run's `precision/saturated_max` as `crucible_run_numerics_saturated_share` for
CrucibleRunNumericsSaturating."""

from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from crucible.api.gpu_utilization import GPU_UTILIZATION_KEY, gpu_utilization
from crucible.domain.metric_keys import NUMERICS_SATURATED_MAX
from crucible.schemas.metrics import MetricBatch
from tests.conftest import make_project, submit

GAUGE = "crucible_run_gpu_utilization_percent"


def exported(admin: TestClient, gauge: str = GAUGE) -> dict[str, float]:
    """Run id -> the gauge's value, as a scraper reads /metrics."""
    response = admin.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        sample.labels["run"]: sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name == gauge
        for sample in family.samples
    }


def log_columns(admin: TestClient, run_id: object, columns: dict[str, Any]) -> int:
    """Post one batch the way the SDK does (as columns); the status code."""
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"columns": [columns]})
    return response.status_code


def test_a_runs_gpu_utilization_is_exported_at_its_highest_step(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    batch = {
        "keys": ["train/loss", GPU_UTILIZATION_KEY],
        "steps": [7, 9, 8],
        "values": [2.5, 40.0, 2.4, 3.5, 2.45, 60.0],
    }
    assert log_columns(admin, run_id, batch) == 200
    assert exported(admin) == {str(run_id): 3.5}


def test_a_hung_runs_readings_at_one_step_still_reach_the_gauge(admin: TestClient) -> None:
    # A run stuck at a step logs every GPU reading at that step; storage keeps the first
    # as the step's value, but the gauge must show the newest, or a hang would never alert.
    make_project(admin)
    run_id = submit(admin)["id"]
    busy = {"keys": [GPU_UTILIZATION_KEY], "steps": [120], "values": [97.0]}
    assert log_columns(admin, run_id, busy) == 200
    # Two readings in one batch, as after the SDK waited out an unreachable API.
    idle = {"keys": [GPU_UTILIZATION_KEY], "steps": [120, 120], "values": [60.0, 0.0]}
    assert log_columns(admin, run_id, idle) == 200
    assert exported(admin) == {str(run_id): 0.0}


def test_a_batch_without_gpu_utilization_adds_no_series(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    batch = {"keys": ["train/loss", "system/gpu0/utilization"], "steps": [1], "values": [2, 50]}
    assert log_columns(admin, run_id, batch) == 200
    assert exported(admin) == {}


def test_a_refused_batch_adds_no_series(admin: TestClient) -> None:
    batch = {"keys": [GPU_UTILIZATION_KEY], "steps": [1], "values": [0.0]}
    assert log_columns(admin, 999_999, batch) == 404
    assert exported(admin) == {}


def utilization_at(step: int, percent: float) -> MetricBatch:
    return MetricBatch.model_validate(
        {"points": [{"key": GPU_UTILIZATION_KEY, "step": step, "value": percent}]}
    )


def test_a_value_is_exported_until_it_is_older_than_fresh_for() -> None:
    now = [1000.0]
    table = gpu_utilization(fresh_for=120.0, clock=lambda: now[0])
    table.record(1, utilization_at(10, 3.0))
    now[0] += 60
    table.record(2, utilization_at(10, 90.0))

    now[0] += 60
    assert table.fresh() == {1: 3.0, 2: 90.0}
    now[0] += 1
    assert table.fresh() == {2: 90.0}, "run 1 reported 121 s ago"
    now[0] += 60
    assert table.fresh() == {}

    table.record(1, utilization_at(11, 4.0))
    assert table.fresh() == {1: 4.0}, "a run that reports again is exported again"


def test_a_low_precision_runs_worst_saturation_is_exported_beside_its_utilization(
    admin: TestClient,
) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    batch = {
        "keys": [NUMERICS_SATURATED_MAX, GPU_UTILIZATION_KEY],
        "steps": [50, 100],
        "values": [0.001, 90.0, 0.034, 91.0],
    }
    assert log_columns(admin, run_id, batch) == 200
    assert exported(admin, "crucible_run_numerics_saturated_share") == {str(run_id): 0.034}
    assert exported(admin) == {str(run_id): 91.0}
