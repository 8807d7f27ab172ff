"""A metric's history, from Crucible's metric store: every point, or (the bulk-interval
read the MLflow UI charts from) at most `max_results` per run, evenly cut."""

from typing import Any

from sqlalchemy.orm import Session

from crucible.core.metrics.history import history
from crucible.domain.enums import Role
from crucible.mlflow_compat import ids, runs
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.errors import invalid

MAX_BULK_RUNS = 100
MAX_BULK_RESULTS = 2500


def metric_history(session: Session, caller: Caller, run_id: str, key: str) -> list[dict[str, Any]]:
    """Every point, in one page: MLflow's `max_results` pages a history, it never thins it."""
    return [point for point, _ in _points(session, caller, run_id, key, None, None)]


def _points(
    session: Session,
    caller: Caller,
    run_id: str,
    key: str,
    start_step: int | None,
    end_step: int | None,
) -> list[tuple[dict[str, Any], int]]:
    """The run's points of `key` between the steps, as MLflow's metrics, each with its index."""
    run = runs.load(session, caller, run_id, Role.viewer)
    found = history(
        session=session,
        principal=caller.principal,
        run_id=run.id,
        keys=[key],
        step_min=start_step,
        step_max=end_step,
    )
    return [
        ({"key": key, "value": value, "timestamp": int(time * 1000), "step": step}, index)
        for series in found.series
        for index, (step, value, time) in enumerate(
            zip(series.steps, series.values, series.times, strict=True)
        )
    ]


def bulk_interval(
    session: Session,
    caller: Caller,
    *,
    run_ids: list[str],
    key: str,
    start_step: int | None,
    end_step: int | None,
    max_results: int,
) -> list[dict[str, Any]]:
    if not run_ids or len(run_ids) > MAX_BULK_RUNS:
        raise invalid(
            f"GetMetricHistoryBulkInterval takes 1 to {MAX_BULK_RUNS} run ids, got {len(run_ids)}"
        )
    if not 0 < max_results <= MAX_BULK_RESULTS:
        raise invalid(f"max_results must be between 1 and {MAX_BULK_RESULTS}, got {max_results}")
    if (start_step is None) != (end_step is None):
        raise invalid("Both start_step and end_step must be specified, or neither")
    if start_step is not None and end_step is not None and start_step > end_step:
        raise invalid(f"end_step {end_step} must be at least start_step {start_step}")
    chosen = []
    for run_id in run_ids:
        points = _points(session, caller, run_id, key, start_step, end_step)
        canonical = str(ids.parse_id(run_id, "Run"))
        every = max(1, -(-len(points) // max_results))
        for point, index in points:
            # Evenly spaced, and the last point always, as MLflow's server keeps it.
            if index % every == 0 or index == len(points) - 1:
                chosen.append({**point, "run_id": canonical})
    return chosen
