"""MLflow runs: Crucible runs (kind train) of the experiment, marked as MLflow's by an
annotation on their manifest, so the local executor never takes them for its own."""

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.events import record_event
from crucible.core.transitions import move_run
from crucible.db.tables import (
    Dataset,
    DatasetVersion,
    LoggedModel,
    MetricChunk,
    MetricSeries,
    Run,
    RunInput,
)
from crucible.domain import reasons
from crucible.domain.digests import spec_digest
from crucible.domain.enums import Backend, Phase, Role, RunKind
from crucible.domain.origins import ORIGIN_ANNOTATION, ORIGIN_MLFLOW, is_from_mlflow
from crucible.domain.resources import API_VERSION
from crucible.domain.specs import MAX_RUN_NAME
from crucible.mlflow_compat import experiments, ids, limits
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.entities import (
    PHASE_OF_STATUS,
    RUN_NAME_TAG,
    USER_TAG,
    params_of,
    run_info,
)
from crucible.mlflow_compat.errors import INVALID_STATE, MlflowError, invalid

REASON_MLFLOW = "MlflowClient"


def load(
    session: Session, caller: Caller, run_id: str, role: Role, *, for_update: bool = False
) -> Run:
    run = session.get(Run, ids.parse_id(run_id, "Run"), with_for_update=for_update)
    caller.owns(run.project_id if run else None, role, entity="Run", key=run_id)
    assert run is not None
    return run


def load_active(session: Session, caller: Caller, run_id: str) -> Run:
    """A run to write to, locked until the transaction ends: its params and tags are read,
    merged and written back, and the client sends batches at once (the Trainer's callback
    logs its params asynchronously), which would otherwise lose each other's keys. MLflow
    refuses writes to a deleted run."""
    run = load(session, caller, run_id, Role.editor, for_update=True)
    if run.deleted_at is not None:
        raise MlflowError(
            INVALID_STATE,
            f"The run {run_id} must be in the 'active' state. Current state is deleted.",
        )
    return run


def _crucible_name(run_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", run_name.lower()).strip("-")[: MAX_RUN_NAME - 9]
    suffix = uuid.uuid4().hex[:8]
    return f"{slug.rstrip('-')}-{suffix}" if slug else f"mlflow-{suffix}"


def create(
    session: Session,
    caller: Caller,
    *,
    experiment_id: str,
    run_name: str,
    user_id: str,
    start_time: int | None,
    tags: list[tuple[str, str]],
) -> dict[str, Any]:
    for key, value in tags:
        limits.check_tag(key, value)
    run_tags = dict(tags)
    run_name = run_name or run_tags.get(RUN_NAME_TAG, "")
    limits.check_run_name(run_name)
    limits.check_length("User id", user_id, limits.MAX_USER_ID_LENGTH)
    started = limits.moment_of_millis("start_time", start_time) if start_time else datetime.now(UTC)
    experiment = experiments.load(session, caller, experiment_id or "0", Role.editor)
    if experiment.deleted_at is not None:
        raise MlflowError(
            INVALID_STATE, f"The experiment {experiment.id} must be in the 'active' state."
        )
    name = _crucible_name(run_name)
    run_tags[RUN_NAME_TAG] = run_name or name
    if user_id:
        run_tags.setdefault(USER_TAG, user_id)
    spec = {"experiment": experiment.name, "config": {}}
    run = Run(
        project_id=experiment.project_id,
        experiment_id=experiment.id,
        name=name,
        kind=RunKind.train.value,
        backend=Backend.local.value,
        phase=Phase.Running.value,
        reason=REASON_MLFLOW,
        manifest={
            "apiVersion": API_VERSION,
            "kind": "TrainingRun",
            "metadata": {"name": name, "annotations": {ORIGIN_ANNOTATION: ORIGIN_MLFLOW}},
            "spec": spec,
        },
        spec_digest=spec_digest(spec),
        tags=run_tags,
        started_at=started,
    )
    session.add(run)
    session.flush()
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_SUBMITTED,
        reason=REASON_MLFLOW,
        message="created by an MLflow client",
    )
    return run_json(session, run)


def update(
    session: Session,
    caller: Caller,
    run_id: str,
    *,
    status: str,
    end_time: int | None,
    run_name: str,
) -> dict[str, Any]:
    limits.check_run_name(run_name)
    ended = limits.moment_of_millis("end_time", end_time) if end_time else None
    run = load_active(session, caller, run_id)
    if run_name:
        run.tags = {**run.tags, RUN_NAME_TAG: run_name}
    if status:
        phase = PHASE_OF_STATUS.get(status)
        if phase is None:
            raise invalid(
                f"Invalid value {status!r} for parameter 'status'; use one of "
                f"{', '.join(PHASE_OF_STATUS)}"
            )
        # A run Crucible started belongs to its backend, which reports its phase; the MLflow
        # code inside it ending its run does not end the Crucible run.
        if is_from_mlflow(run.manifest):
            _move(session, run, phase)
            if ended is not None and Phase(run.phase).is_terminal:
                run.finished_at = ended
    session.flush()
    return run_info(run)


def _move(session: Session, run: Run, phase: Phase) -> None:
    current = Phase(run.phase)
    if current is phase:
        return
    if current.is_terminal and phase is Phase.Running:
        # MLflow resumes a finished run (start_run(run_id=...)); Crucible's machine has no
        # such edge, so it is recorded as the reopening it is.
        run.phase, run.reason, run.finished_at = phase.value, REASON_MLFLOW, None
        record_event(
            session,
            run_id=run.id,
            type=reasons.EVENT_PHASE_CHANGED,
            reason=REASON_MLFLOW,
            message="reopened by an MLflow client",
            data={"phase": phase.value},
        )
        return
    move_run(session, run, phase, REASON_MLFLOW, f"set {phase.value} by an MLflow client")


def set_deleted(session: Session, caller: Caller, run_id: str, *, deleted: bool) -> None:
    run = load(session, caller, run_id, Role.editor)
    run.deleted_at = datetime.now(UTC) if deleted else None


def get(session: Session, caller: Caller, run_id: str) -> dict[str, Any]:
    return run_json(session, load(session, caller, run_id, Role.viewer))


def latest_metrics(session: Session, run_ids: list[int]) -> dict[int, dict[str, dict[str, Any]]]:
    """Each run's metrics at their last step: key -> {value, step, timestamp}."""
    last_time = (
        select(MetricChunk.series_id, func.max(MetricChunk.last_time).label("time"))
        .group_by(MetricChunk.series_id)
        .subquery()
    )
    rows = session.execute(
        select(
            MetricSeries.run_id,
            MetricSeries.key,
            MetricSeries.last_value,
            MetricSeries.last_step,
            last_time.c.time,
        )
        .outerjoin(last_time, last_time.c.series_id == MetricSeries.id)
        .where(MetricSeries.run_id.in_(run_ids), MetricSeries.point_count > 0)
    ).all()
    found: dict[int, dict[str, dict[str, Any]]] = {run_id: {} for run_id in run_ids}
    for run_id, key, value, step, time in rows:
        found[run_id][key] = {
            "key": key,
            "value": value,
            "step": step or 0,
            "timestamp": int((time or 0) * 1000),
        }
    return found


def run_json(
    session: Session, run: Run, metrics: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    if metrics is None:
        metrics = latest_metrics(session, [run.id])[run.id]
    return {
        "info": run_info(run),
        "data": {
            "metrics": [metrics[k] for k in sorted(metrics)],
            "params": [{"key": k, "value": v} for k, v in sorted(params_of(run).items())],
            "tags": [{"key": k, "value": str(v)} for k, v in sorted(run.tags.items())],
        },
        "inputs": {"dataset_inputs": dataset_inputs(session, run.id)},
        "outputs": {"model_outputs": model_outputs(session, run.id)},
    }


def dataset_inputs(session: Session, run_id: int) -> list[dict[str, Any]]:
    """The run's dataset inputs that MLflow logged, as MLflow described them."""
    rows = session.execute(
        select(DatasetVersion.schema, Dataset.name)
        .join(RunInput, RunInput.dataset_version_id == DatasetVersion.id)
        .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        .where(RunInput.run_id == run_id)
        .order_by(RunInput.id)
    ).all()
    inputs = []
    for schema, _name in rows:
        described = (schema or {}).get("mlflow")
        if described:
            inputs.append(
                {"tags": described.get("input_tags", []), "dataset": described["dataset"]}
            )
    return inputs


def model_outputs(session: Session, run_id: int) -> list[dict[str, Any]]:
    rows = session.execute(
        select(LoggedModel.id, LoggedModel.step)
        .where(LoggedModel.source_run_id == run_id, LoggedModel.deleted_at.is_(None))
        .order_by(LoggedModel.created_at)
    ).all()
    return [{"model_id": model_id, "step": step} for model_id, step in rows]
