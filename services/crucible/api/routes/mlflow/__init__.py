"""MLflow's tracking REST API under /mlflow (docs/mlflow.md): the tracking URI an MLflow
client is given is `http://HOST:PORT/mlflow`. Left out of the OpenAPI schema: its contract
is MLflow's, not Crucible's."""

from fastapi import APIRouter

from crucible.api.routes.mlflow import artifacts, experiments, models, runs
from crucible.api.routes.mlflow.support import MlflowRoute
from crucible.mlflow_compat.errors import ENDPOINT_NOT_FOUND, MlflowError

router = APIRouter(route_class=MlflowRoute, include_in_schema=False)
for module in (experiments, runs, models, artifacts):
    router.include_router(module.router)


@router.api_route("/mlflow/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def not_here(rest: str) -> None:
    """Everything else under the prefix (the model registry, traces, ...) says so in MLflow's
    words, rather than falling through to the dashboard."""
    raise MlflowError(ENDPOINT_NOT_FOUND, f"Crucible does not serve the MLflow endpoint /{rest}")
