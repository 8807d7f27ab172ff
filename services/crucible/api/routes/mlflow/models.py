"""MLflow 3's logged-model endpoints."""

from typing import Any

from fastapi import APIRouter

from crucible.api.deps import Uow
from crucible.api.routes.mlflow.support import API, CallerDep, FieldsDep, LocationDep, MlflowRoute
from crucible.mlflow_compat import models
from crucible.mlflow_compat.fields import integer, key_values, strings, text

router = APIRouter(prefix=API + "/logged-models", route_class=MlflowRoute, include_in_schema=False)


@router.post("")
def create(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        model = models.create(
            session,
            caller,
            experiment_id=text(fields, "experiment_id", required=True),
            name=text(fields, "name"),
            model_type=text(fields, "model_type"),
            source_run_id=text(fields, "source_run_id"),
            params=key_values(fields, "params"),
            tags=key_values(fields, "tags"),
        )
    return {"model": model}


@router.post("/search")
def search(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        return models.search(
            session,
            caller,
            experiment_ids=strings(fields, "experiment_ids"),
            filter_text=text(fields, "filter"),
            max_results=integer(fields, "max_results", default=100) or 0,
            page_token=text(fields, "page_token"),
        )


@router.get("/{model_id}")
def get(model_id: str, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        return {"model": models.get(session, caller, model_id)}


@router.patch("/{model_id}")
def finalize(
    model_id: str, fields: FieldsDep, caller: CallerDep, uow: Uow, location: LocationDep
) -> dict[str, Any]:
    with uow() as session:
        model = models.finalize(
            session, caller, location, model_id, text(fields, "status", required=True)
        )
    return {"model": model}


@router.delete("/{model_id}")
def delete(model_id: str, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        models.delete(session, caller, model_id)
    return {}


@router.patch("/{model_id}/tags")
def set_tags(model_id: str, fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        models.set_tags(session, caller, model_id, key_values(fields, "tags"))
    return {}


@router.delete("/{model_id}/tags/{key:path}")
def delete_tag(model_id: str, key: str, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        models.delete_tag(session, caller, model_id, key)
    return {}


@router.post("/{model_id}/params")
def log_params(model_id: str, fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        models.log_params(session, caller, model_id, key_values(fields, "params"))
    return {}
