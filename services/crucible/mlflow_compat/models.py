"""MLflow's logged models. One is created PENDING, its files uploaded through the artifact
proxy, then finalized; READY registers those files as a checkpoint of the run that logged
it, with the lineage every checkpoint has (run -> checkpoint)."""

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.checkpoints import register_checkpoint
from crucible.db.tables import Checkpoint, LoggedModel
from crucible.domain.enums import Role
from crucible.mlflow_compat import experiments, ids, limits, runs
from crucible.mlflow_compat.artifacts import Location
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.entities import logged_model_json
from crucible.mlflow_compat.errors import invalid
from crucible.mlflow_compat.fields import integer, text
from crucible.mlflow_compat.pages import page_of
from crucible.schemas.lineage import CheckpointCreate

PENDING = "LOGGED_MODEL_PENDING"
READY = "LOGGED_MODEL_READY"
FAILED = "LOGGED_MODEL_UPLOAD_FAILED"
STATUSES = (PENDING, READY, FAILED)
MAX_SEARCH_RESULTS = 1000
MAX_MODEL_TEXT_LENGTH = 500  # the size of the name and model_type columns


def load(session: Session, caller: Caller, model_id: str, role: Role) -> LoggedModel:
    model = session.get(LoggedModel, model_id)
    live = model is not None and model.deleted_at is None
    caller.owns(
        model.project_id if model and live else None, role, entity="Logged model", key=model_id
    )
    assert model is not None
    return model


def create(
    session: Session,
    caller: Caller,
    *,
    experiment_id: str,
    name: str,
    model_type: str,
    source_run_id: str,
    params: list[tuple[str, str]],
    tags: list[tuple[str, str]],
) -> dict[str, Any]:
    for key, value in params:
        limits.check_param(key, value)
    for key, value in tags:
        limits.check_tag(key, value)
    limits.check_length("Model name", name, MAX_MODEL_TEXT_LENGTH)
    limits.check_length("Model type", model_type, MAX_MODEL_TEXT_LENGTH)
    experiment = experiments.load(session, caller, experiment_id, Role.editor)
    run_id = None
    if source_run_id:
        run = runs.load_active(session, caller, source_run_id)
        if run.experiment_id != experiment.id:
            raise invalid(
                f"Run {source_run_id} is in experiment {run.experiment_id}, not in "
                f"experiment {experiment.id} where the model is logged"
            )
        run_id = run.id
    model = LoggedModel(
        id=ids.new_model_id(),
        project_id=experiment.project_id,
        experiment_id=experiment.id,
        source_run_id=run_id,
        name=name or f"model-{uuid.uuid4().hex[:8]}",
        status=PENDING,
        model_type=model_type,
        step=0,
        tags=dict(tags),
        params=dict(params),
    )
    session.add(model)
    session.flush()
    return logged_model_json(model)


def get(session: Session, caller: Caller, model_id: str) -> dict[str, Any]:
    return logged_model_json(load(session, caller, model_id, Role.viewer))


def finalize(
    session: Session, caller: Caller, location: Location, model_id: str, status: str
) -> dict[str, Any]:
    if status not in (READY, FAILED):
        raise invalid(
            f"Invalid status {status!r} to finalize a model with; use {READY} or {FAILED}"
        )
    model = load(session, caller, model_id, Role.editor)
    model.status = status
    if status == READY and model.source_run_id is not None and model.checkpoint_id is None:
        model.checkpoint_id = _register(session, caller, location, model)
    session.flush()
    return logged_model_json(model)


def _register(
    session: Session, caller: Caller, location: Location, model: LoggedModel
) -> int | None:
    """The model's files as a checkpoint of its run, at the model's step, or past the run's
    last checkpoint when that step holds another one (MLflow logs every model at step 0)."""
    assert model.source_run_id is not None
    path = ids.model_artifact_path(model.experiment_id, model.id)
    content = location.content(path)
    if content is None:
        return None  # a model without files (MLflow's external models)
    step = model.step
    taken = session.scalar(
        select(Checkpoint.id).where(
            Checkpoint.run_id == model.source_run_id, Checkpoint.step == step
        )
    )
    if taken is not None:
        last = session.scalar(
            select(func.max(Checkpoint.step)).where(Checkpoint.run_id == model.source_run_id)
        )
        step = (last or 0) + 1
    checkpoint = register_checkpoint(
        session=session,
        principal=caller.principal,
        run_id=model.source_run_id,
        checkpoint_in=CheckpointCreate(
            step=step,
            uri=location.uri(path),
            digest=content.digest,
            size_bytes=content.size_bytes,
            meta={
                "mlflow_model_id": model.id,
                "mlflow_model_name": model.name,
                "mlflow_step": model.step,
            },
        ),
    )
    return checkpoint.id


def search(
    session: Session,
    caller: Caller,
    *,
    experiment_ids: list[str],
    filter_text: str,
    max_results: int,
    page_token: str,
) -> dict[str, Any]:
    if filter_text.strip():
        raise limits.invalid_filter(filter_text, "Crucible does not filter logged models yet")
    experiment_rows = experiments.readable(session, caller, experiment_ids)
    rows = list(
        session.scalars(
            select(LoggedModel)
            .where(
                LoggedModel.experiment_id.in_([e.id for e in experiment_rows]),
                LoggedModel.deleted_at.is_(None),
            )
            .order_by(LoggedModel.created_at.desc(), LoggedModel.id)
        )
    )
    page, token = page_of(
        rows, max_results=max_results, page_token=page_token, most=MAX_SEARCH_RESULTS
    )
    answer: dict[str, Any] = {"models": [logged_model_json(m) for m in page]}
    if token:
        answer["next_page_token"] = token
    return answer


def set_tags(session: Session, caller: Caller, model_id: str, tags: list[tuple[str, str]]) -> None:
    for key, value in tags:
        limits.check_tag(key, value)
    model = load(session, caller, model_id, Role.editor)
    model.tags = {**model.tags, **dict(tags)}


def delete_tag(session: Session, caller: Caller, model_id: str, key: str) -> None:
    limits.check_not_reserved(key)
    model = load(session, caller, model_id, Role.editor)
    model.tags = {k: v for k, v in model.tags.items() if k != key}


def log_params(
    session: Session, caller: Caller, model_id: str, params: list[tuple[str, str]]
) -> None:
    for key, value in params:
        limits.check_param(key, value)
    model = load(session, caller, model_id, Role.editor)
    model.params = {**model.params, **dict(params)}


def delete(session: Session, caller: Caller, model_id: str) -> None:
    load(session, caller, model_id, Role.editor).deleted_at = datetime.now(UTC)


def log_outputs(
    session: Session, caller: Caller, run_id: str, outputs: list[dict[str, Any]]
) -> None:
    """The run produced these models at these steps (`log_model(step=...)`)."""
    chosen = [(text(o, "model_id", required=True), integer(o, "step", default=0)) for o in outputs]
    run = runs.load_active(session, caller, run_id)
    for model_id, step in chosen:
        model = load(session, caller, model_id, Role.editor)
        if model.source_run_id not in (None, run.id):
            raise invalid(f"Model {model.id} was logged by run {model.source_run_id}, not {run_id}")
        model.source_run_id = run.id
        model.step = step or 0
