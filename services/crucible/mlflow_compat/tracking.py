"""Logging to a run: metrics into the metric store, params into the run's config, tags onto
the run. A batch is checked whole before anything is written, so a rejected one writes
nothing; the route's transaction covers the rest."""

from dataclasses import dataclass

from sqlalchemy.orm import Session

from crucible.core.metrics.ingest import ingest
from crucible.db.tables import Run
from crucible.domain.enums import Phase
from crucible.domain.origins import is_from_mlflow
from crucible.mlflow_compat import limits, runs
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.entities import params_of
from crucible.mlflow_compat.errors import INVALID_STATE, MlflowError, invalid
from crucible.schemas.metrics import MetricBatch


@dataclass(frozen=True)
class MetricIn:
    key: str
    value: float
    timestamp_ms: int
    step: int


def log_batch(
    session: Session,
    caller: Caller,
    run_id: str,
    *,
    metrics: list[MetricIn],
    params: list[tuple[str, str]],
    tags: list[tuple[str, str]],
) -> None:
    limits.check_batch_sizes(len(metrics), len(params), len(tags))
    for metric in metrics:
        limits.check_metric(metric.key, metric.value, metric.timestamp_ms, metric.step)
    for key, value in params:
        limits.check_param(key, value)
    for key, value in tags:
        limits.check_tag(key, value)
    run = runs.load_active(session, caller, run_id)
    new_params = _new_params(run_id, params_of(run), params)
    if new_params:
        _require_config_open(run, run_id, next(iter(new_params)))
        spec = run.manifest.get("spec", {})
        config = {**spec.get("config", {}), **new_params}
        run.manifest = {**run.manifest, "spec": {**spec, "config": config}}
    if tags:
        run.tags = {**run.tags, **dict(tags)}
    session.flush()
    if metrics:
        batch = MetricBatch.model_construct(
            points=[
                {"key": m.key, "step": m.step, "value": m.value, "time": m.timestamp_ms / 1000}
                for m in metrics
            ],
            rows=[],
            columns=[],
        )
        ingest(session=session, principal=caller.principal, run_id=run.id, batch=batch)


def _new_params(
    run_id: str, logged: dict[str, str], params: list[tuple[str, str]]
) -> dict[str, str]:
    """The params not logged yet. MLflow's params are immutable: the same value again is
    fine, another value is refused, in the batch as against the run."""
    new: dict[str, str] = {}
    for key, value in params:
        before = new.get(key, logged.get(key))
        if before is not None and before != value:
            raise invalid(
                f"Changing param values is not allowed. Param with key='{key}' was already "
                f"logged with value='{before}' for run ID='{run_id}'. Attempted logging new "
                f"value '{value}'."
            )
        if key not in logged:
            new[key] = value
    return new


def _require_config_open(run: Run, run_id: str, key: str) -> None:
    """A param is a key of the run's config. A run Crucible ran was ended with the config its
    spec digest and provenance record, so it takes no new key once finished; a run an MLflow
    client made is MLflow's, which lets a finished run take new params."""
    if Phase(run.phase).is_terminal and not is_from_mlflow(run.manifest):
        raise MlflowError(
            INVALID_STATE,
            f"Cannot log param '{key}' to run {run_id}: it is {run.phase}, and the config of a "
            "finished Crucible run is what it ran with; log to a new run.",
        )


def delete_tag(session: Session, caller: Caller, run_id: str, key: str) -> None:
    limits.check_not_reserved(key)
    run = runs.load_active(session, caller, run_id)
    if key not in run.tags:
        raise invalid(f"No tag with name: {key} in run with id {run_id}")
    run.tags = {k: v for k, v in run.tags.items() if k != key}
