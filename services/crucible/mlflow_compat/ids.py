"""MLflow's string ids for Crucible's integer ones, and the URIs of artifacts.

A run's MLflow id is its Crucible id as a decimal string, so `MLFLOW_RUN_ID=$CRUCIBLE_RUN_ID`
makes MLflow code inside a run Crucible started log to that run. An experiment's is its
Crucible id too, except "0", MLflow's default experiment: the caller's project's experiment
named "Default", made on first use. A logged model's is `m-` and 32 hex digits, as MLflow's.
"""

import uuid

from crucible.mlflow_compat.errors import RESOURCE_DOES_NOT_EXIST, MlflowError

DEFAULT_EXPERIMENT_ID = "0"
DEFAULT_EXPERIMENT_NAME = "Default"
ARTIFACT_SCHEME = "mlflow-artifacts:"
_MAX_ID = 2**63 - 1


def parse_id(value: str, entity: str) -> int:
    """The Crucible id in an MLflow id; one that cannot be one names no such entity."""
    if value.isascii() and value.isdigit() and 0 < int(value) <= _MAX_ID:
        return int(value)
    raise MlflowError(RESOURCE_DOES_NOT_EXIST, f"{entity} with id={value!r} not found")


def new_model_id() -> str:
    return f"m-{uuid.uuid4().hex}"


def run_artifact_path(experiment_id: int, run_id: int) -> str:
    return f"{experiment_id}/{run_id}/artifacts"


def model_artifact_path(experiment_id: int, model_id: str) -> str:
    return f"{experiment_id}/models/{model_id}/artifacts"


def artifact_uri(path: str) -> str:
    """What the client resolves against its tracking URI to reach the artifact proxy."""
    return f"{ARTIFACT_SCHEME}/{path}"
