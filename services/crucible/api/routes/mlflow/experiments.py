"""MLflow's experiment endpoints."""

from typing import Any

from fastapi import APIRouter

from crucible.api.deps import Uow
from crucible.api.routes.mlflow.support import API, CallerDep, FieldsDep, MlflowRoute
from crucible.mlflow_compat import experiments
from crucible.mlflow_compat.fields import integer, key_values, text

router = APIRouter(prefix=API, route_class=MlflowRoute, include_in_schema=False)


@router.post("/experiments/create")
def create(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiment_id = experiments.create(
            session, caller, text(fields, "name", required=True), key_values(fields, "tags")
        )
    return {"experiment_id": experiment_id}


@router.get("/experiments/get")
def get(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        found = experiments.get(session, caller, text(fields, "experiment_id", required=True))
    return {"experiment": found}


@router.get("/experiments/get-by-name")
def get_by_name(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        found = experiments.get_by_name(
            session, caller, text(fields, "experiment_name", required=True)
        )
    return {"experiment": found}


@router.post("/experiments/search")
@router.get("/experiments/search")
def search(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        return experiments.search(
            session,
            caller,
            view_type=text(fields, "view_type"),
            name_filter=text(fields, "filter"),
            max_results=integer(fields, "max_results", default=1000) or 0,
            page_token=text(fields, "page_token"),
        )


@router.post("/experiments/update")
def update(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiments.update(
            session, caller, text(fields, "experiment_id", required=True), text(fields, "new_name")
        )
    return {}


@router.post("/experiments/delete")
def delete(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiments.set_deleted(
            session, caller, text(fields, "experiment_id", required=True), deleted=True
        )
    return {}


@router.post("/experiments/restore")
def restore(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiments.set_deleted(
            session, caller, text(fields, "experiment_id", required=True), deleted=False
        )
    return {}


@router.post("/experiments/set-experiment-tag")
def set_tag(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiments.set_tag(
            session,
            caller,
            text(fields, "experiment_id", required=True),
            text(fields, "key", required=True),
            text(fields, "value"),
        )
    return {}


@router.post("/experiments/delete-experiment-tag")
def delete_tag(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        experiments.delete_tag(
            session,
            caller,
            text(fields, "experiment_id", required=True),
            text(fields, "key", required=True),
        )
    return {}
