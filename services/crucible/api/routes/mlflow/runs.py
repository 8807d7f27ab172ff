"""MLflow's run, logging and metric-history endpoints."""

import time
from typing import Any

from fastapi import APIRouter

from crucible.api.deps import Uow
from crucible.api.routes.mlflow.support import API, CallerDep, FieldsDep, MlflowRoute
from crucible.mlflow_compat import history, inputs, models, runs, search, tracking
from crucible.mlflow_compat.fields import (
    Fields,
    integer,
    key_values,
    number,
    objects,
    strings,
    text,
)
from crucible.mlflow_compat.tracking import MetricIn

router = APIRouter(prefix=API, route_class=MlflowRoute, include_in_schema=False)


def _run_id(fields: Fields) -> str:
    """MLflow still sends the old name `run_uuid` beside `run_id`."""
    return text(fields, "run_id") or text(fields, "run_uuid", required=True)


def _metric(fields: Fields) -> MetricIn:
    return MetricIn(
        key=text(fields, "key", required=True),
        value=number(fields, "value"),
        timestamp_ms=integer(fields, "timestamp", default=int(time.time() * 1000)) or 0,
        step=integer(fields, "step", default=0) or 0,
    )


@router.post("/runs/create")
def create(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        run = runs.create(
            session,
            caller,
            experiment_id=text(fields, "experiment_id"),
            run_name=text(fields, "run_name"),
            user_id=text(fields, "user_id"),
            start_time=integer(fields, "start_time"),
            tags=key_values(fields, "tags"),
        )
    return {"run": run}


@router.get("/runs/get")
def get(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        return {"run": runs.get(session, caller, _run_id(fields))}


@router.post("/runs/update")
def update(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        info = runs.update(
            session,
            caller,
            _run_id(fields),
            status=text(fields, "status"),
            end_time=integer(fields, "end_time"),
            run_name=text(fields, "run_name"),
        )
    return {"run_info": info}


@router.post("/runs/delete")
def delete(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        runs.set_deleted(session, caller, text(fields, "run_id", required=True), deleted=True)
    return {}


@router.post("/runs/restore")
def restore(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        runs.set_deleted(session, caller, text(fields, "run_id", required=True), deleted=False)
    return {}


@router.post("/runs/search")
def search_runs(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        return search.search(
            session,
            caller,
            experiment_ids=strings(fields, "experiment_ids"),
            filter_text=text(fields, "filter"),
            view_type=text(fields, "run_view_type"),
            max_results=integer(fields, "max_results", default=1000) or 0,
            order_by=strings(fields, "order_by"),
            page_token=text(fields, "page_token"),
        )


@router.post("/runs/log-metric")
def log_metric(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        tracking.log_batch(
            session, caller, _run_id(fields), metrics=[_metric(fields)], params=[], tags=[]
        )
    return {}


@router.post("/runs/log-parameter")
def log_param(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    param = (text(fields, "key", required=True), text(fields, "value"))
    with uow() as session:
        tracking.log_batch(session, caller, _run_id(fields), metrics=[], params=[param], tags=[])
    return {}


@router.post("/runs/set-tag")
def set_tag(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    tag = (text(fields, "key", required=True), text(fields, "value"))
    with uow() as session:
        tracking.log_batch(session, caller, _run_id(fields), metrics=[], params=[], tags=[tag])
    return {}


@router.post("/runs/delete-tag")
def delete_tag(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        tracking.delete_tag(
            session,
            caller,
            text(fields, "run_id", required=True),
            text(fields, "key", required=True),
        )
    return {}


@router.post("/runs/log-batch")
def log_batch(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    metrics = [_metric(m) for m in objects(fields, "metrics")]
    with uow() as session:
        tracking.log_batch(
            session,
            caller,
            text(fields, "run_id", required=True),
            metrics=metrics,
            params=key_values(fields, "params"),
            tags=key_values(fields, "tags"),
        )
    return {}


@router.post("/runs/log-inputs")
def log_inputs(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        run_id = text(fields, "run_id", required=True)
        inputs.log_inputs(session, caller, run_id, objects(fields, "datasets"))
        if objects(fields, "models"):
            models.log_outputs(session, caller, run_id, objects(fields, "models"))
    return {}


@router.post("/runs/outputs")
def log_outputs(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        models.log_outputs(
            session, caller, text(fields, "run_id", required=True), objects(fields, "models")
        )
    return {}


@router.get("/metrics/get-history")
def get_history(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        points = history.metric_history(
            session,
            caller,
            _run_id(fields),
            text(fields, "metric_key", required=True),
        )
    return {"metrics": points}


@router.get("/metrics/get-history-bulk-interval")
def get_history_bulk_interval(fields: FieldsDep, caller: CallerDep, uow: Uow) -> dict[str, Any]:
    with uow() as session:
        points = history.bulk_interval(
            session,
            caller,
            run_ids=strings(fields, "run_ids"),
            key=text(fields, "metric_key", required=True),
            start_step=integer(fields, "start_step"),
            end_step=integer(fields, "end_step"),
            max_results=integer(fields, "max_results", default=history.MAX_BULK_RESULTS) or 0,
        )
    return {"metrics": points}
