"""Crucible rows as MLflow's JSON entities (protobuf field names, times in milliseconds)."""

from datetime import datetime
from typing import Any

from crucible.db.tables import Experiment, LoggedModel, Run
from crucible.domain.enums import Phase
from crucible.mlflow_compat import ids

# Crucible's phase -> MLflow's run status. Every phase before the end is RUNNING to MLflow.
STATUS_OF_PHASE = {
    Phase.Succeeded: "FINISHED",
    Phase.Failed: "FAILED",
    Phase.Cancelled: "KILLED",
}
PHASE_OF_STATUS = {
    "RUNNING": Phase.Running,
    "SCHEDULED": Phase.Running,
    "FINISHED": Phase.Succeeded,
    "FAILED": Phase.Failed,
    "KILLED": Phase.Cancelled,
}
RUN_NAME_TAG = "mlflow.runName"
USER_TAG = "mlflow.user"


def millis(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def pairs(values: dict[str, Any]) -> list[dict[str, str]]:
    return [{"key": k, "value": str(v)} for k, v in sorted(values.items())]


def experiment_json(experiment: Experiment) -> dict[str, Any]:
    return {
        "experiment_id": str(experiment.id),
        "name": experiment.name,
        "artifact_location": ids.artifact_uri(str(experiment.id)),
        "lifecycle_stage": "deleted" if experiment.deleted_at else "active",
        "creation_time": millis(experiment.created_at),
        "last_update_time": millis(experiment.updated_at),
        "tags": pairs(experiment.tags),
    }


def run_status(run: Run) -> str:
    return STATUS_OF_PHASE.get(Phase(run.phase), "RUNNING")


def run_info(run: Run) -> dict[str, Any]:
    info = {
        "run_id": str(run.id),
        "run_uuid": str(run.id),
        "run_name": run.tags.get(RUN_NAME_TAG, run.name),
        "experiment_id": str(run.experiment_id),
        "user_id": run.tags.get(USER_TAG, ""),
        "status": run_status(run),
        "start_time": millis(run.started_at or run.created_at),
        "artifact_uri": ids.artifact_uri(ids.run_artifact_path(run.experiment_id, run.id)),
        "lifecycle_stage": "deleted" if run.deleted_at else "active",
    }
    if run.finished_at is not None:
        info["end_time"] = millis(run.finished_at)
    return info


def params_of(run: Run) -> dict[str, str]:
    config = run.manifest.get("spec", {}).get("config", {})
    return {k: v if isinstance(v, str) else _param_text(v) for k, v in config.items()}


def _param_text(value: Any) -> str:
    import json

    return (
        json.dumps(value) if isinstance(value, dict | list | bool) or value is None else str(value)
    )


def logged_model_json(model: LoggedModel) -> dict[str, Any]:
    info = {
        "model_id": model.id,
        "experiment_id": str(model.experiment_id),
        "name": model.name,
        "creation_timestamp_ms": millis(model.created_at),
        "last_updated_timestamp_ms": millis(model.updated_at),
        "artifact_uri": ids.artifact_uri(ids.model_artifact_path(model.experiment_id, model.id)),
        "status": model.status,
        "model_type": model.model_type,
        "tags": pairs(model.tags),
    }
    if model.source_run_id is not None:
        info["source_run_id"] = str(model.source_run_id)
    return {"info": info, "data": {"params": pairs(model.params), "metrics": []}}
