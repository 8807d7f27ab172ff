"""MLflow experiments: Crucible experiments of the caller's project, soft-deleted by MLflow."""

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.db.tables import Experiment
from crucible.db.upsert import insert_ignoring_duplicates
from crucible.domain.enums import Role
from crucible.mlflow_compat import ids, limits
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.entities import experiment_json
from crucible.mlflow_compat.errors import (
    INVALID_STATE,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    MlflowError,
    invalid,
)
from crucible.mlflow_compat.filters import (
    MAX_LIKE_PATTERN_LENGTH,
    check_filter_length,
    like_matcher,
)
from crucible.mlflow_compat.pages import page_of

# MLflow sets no bound; each id is a lookup, and the UI compares a few dozen at most.
MAX_SEARCHED_EXPERIMENTS = 1000


def load(session: Session, caller: Caller, experiment_id: str, role: Role) -> Experiment:
    """The experiment behind an MLflow id; another project's answers as a missing one."""
    if experiment_id == ids.DEFAULT_EXPERIMENT_ID:
        return default_experiment(session, caller, role)
    experiment = session.get(Experiment, ids.parse_id(experiment_id, "Experiment"))
    caller.owns(
        experiment.project_id if experiment else None, role, entity="Experiment", key=experiment_id
    )
    assert experiment is not None
    return experiment


def default_experiment(session: Session, caller: Caller, role: Role) -> Experiment:
    """MLflow's experiment 0, made by the first write to it; a read before that finds none,
    as MLflow answers for an experiment that does not exist, and writes nothing."""
    project_id = caller.project_id(session, role)
    if role is not Role.viewer:
        insert_ignoring_duplicates(
            session, Experiment, project_id=project_id, name=ids.DEFAULT_EXPERIMENT_NAME
        )
    found = by_name(session, project_id, ids.DEFAULT_EXPERIMENT_NAME)
    if found is None:
        raise MlflowError(
            RESOURCE_DOES_NOT_EXIST,
            f"No Experiment with id={ids.DEFAULT_EXPERIMENT_ID} exists: MLflow's default "
            "experiment is made by the first run logged to it",
        )
    return found


def readable(session: Session, caller: Caller, experiment_ids: list[str]) -> list[Experiment]:
    """The experiments a search reads. The default one, not made yet, holds nothing, so a
    search of it finds nothing rather than failing."""
    if len(experiment_ids) > MAX_SEARCHED_EXPERIMENTS:
        raise invalid(
            f"Invalid value for parameter 'experiment_ids': {len(experiment_ids)} experiments, "
            f"more than {MAX_SEARCHED_EXPERIMENTS} in one search"
        )
    found = []
    for experiment_id in experiment_ids:
        if experiment_id == ids.DEFAULT_EXPERIMENT_ID:
            project_id = caller.project_id(session, Role.viewer)
            default = by_name(session, project_id, ids.DEFAULT_EXPERIMENT_NAME)
            if default is not None:
                found.append(default)
        else:
            found.append(load(session, caller, experiment_id, Role.viewer))
    return found


def by_name(session: Session, project_id: int, name: str) -> Experiment | None:
    return session.scalar(
        select(Experiment).where(Experiment.project_id == project_id, Experiment.name == name)
    )


def create(session: Session, caller: Caller, name: str, tags: list[tuple[str, str]]) -> str:
    limits.check_experiment_name(name)
    for key, value in tags:
        limits.check_experiment_tag(key, value)
    project_id = caller.project_id(session, Role.editor)
    existing = by_name(session, project_id, name)
    if existing is not None:
        raise MlflowError(
            RESOURCE_ALREADY_EXISTS,
            f"Experiment(name={name}) already exists"
            + (" (deleted: restore it or pick another name)" if existing.deleted_at else ""),
        )
    experiment = Experiment(project_id=project_id, name=name, tags=dict(tags))
    session.add(experiment)
    session.flush()
    return str(experiment.id)


def get_by_name(session: Session, caller: Caller, name: str) -> dict[str, Any]:
    project_id = caller.project_id(session, Role.viewer)
    experiment = by_name(session, project_id, name)
    if experiment is None:
        raise MlflowError(
            "RESOURCE_DOES_NOT_EXIST", f"Could not find experiment with name '{name}'"
        )
    return experiment_json(experiment)


def get(session: Session, caller: Caller, experiment_id: str) -> dict[str, Any]:
    return experiment_json(load(session, caller, experiment_id, Role.viewer))


def search(
    session: Session,
    caller: Caller,
    *,
    view_type: str,
    name_filter: str,
    max_results: int,
    page_token: str,
) -> dict[str, Any]:
    """Experiments of the project; the filter supports `name = '...'` and `name LIKE '...'`,
    what the fluent API and the HF callback send."""
    project_id = caller.project_id(session, Role.viewer)
    rows = list(
        session.scalars(
            select(Experiment)
            .where(Experiment.project_id == project_id)
            .order_by(Experiment.created_at.desc(), Experiment.id.desc())
        )
    )
    rows = [r for r in rows if in_view(r.deleted_at is not None, view_type)]
    matcher = _name_matcher(name_filter)
    rows = [r for r in rows if matcher(r.name)]
    page, token = page_of(rows, max_results=max_results, page_token=page_token, most=50_000)
    answer: dict[str, Any] = {"experiments": [experiment_json(r) for r in page]}
    if token:
        answer["next_page_token"] = token
    return answer


def in_view(deleted: bool, view_type: str) -> bool:
    if view_type in ("", "ACTIVE_ONLY"):
        return not deleted
    if view_type == "DELETED_ONLY":
        return deleted
    return True


def _name_matcher(name_filter: str) -> Any:
    check_filter_length(name_filter)
    text = name_filter.strip()
    if not text:
        return lambda _name: True
    match = re.fullmatch(
        r"(?:attributes?\.)?name\s*(=|!=|LIKE|ILIKE)\s*(['\"])(.*)\2", text, re.IGNORECASE
    )
    if match is None:
        raise limits.invalid_filter(
            name_filter, "experiments can be filtered by name only (name = '...' or LIKE)"
        )
    op, value = match.group(1).upper(), match.group(3)
    if op == "=":
        return lambda name: name == value
    if op == "!=":
        return lambda name: name != value
    if len(value) > MAX_LIKE_PATTERN_LENGTH:
        raise limits.invalid_filter(
            name_filter[:100], f"a {op} pattern has at most {MAX_LIKE_PATTERN_LENGTH} characters"
        )
    return like_matcher(value, ignore_case=op == "ILIKE")


def update(session: Session, caller: Caller, experiment_id: str, new_name: str) -> None:
    experiment = load(session, caller, experiment_id, Role.editor)
    if new_name:
        limits.check_experiment_name(new_name)
        other = by_name(session, experiment.project_id, new_name)
        if other is not None and other.id != experiment.id:
            raise MlflowError(
                RESOURCE_ALREADY_EXISTS, f"Experiment(name={new_name}) already exists"
            )
        experiment.name = new_name


def set_deleted(session: Session, caller: Caller, experiment_id: str, *, deleted: bool) -> None:
    experiment = load(session, caller, experiment_id, Role.editor)
    if deleted and experiment.name == ids.DEFAULT_EXPERIMENT_NAME:
        raise MlflowError(INVALID_STATE, "Cannot delete the default experiment")
    experiment.deleted_at = datetime.now(UTC) if deleted else None


def set_tag(session: Session, caller: Caller, experiment_id: str, key: str, value: str) -> None:
    limits.check_experiment_tag(key, value)
    experiment = load(session, caller, experiment_id, Role.editor)
    _require_active(experiment)
    experiment.tags = {**experiment.tags, key: value}


def delete_tag(session: Session, caller: Caller, experiment_id: str, key: str) -> None:
    limits.check_not_reserved(key)
    experiment = load(session, caller, experiment_id, Role.editor)
    _require_active(experiment)
    experiment.tags = {k: v for k, v in experiment.tags.items() if k != key}


def _require_active(experiment: Experiment) -> None:
    if experiment.deleted_at is not None:
        raise MlflowError(
            INVALID_STATE,
            f"The experiment {experiment.id} must be in the 'active' state; restore it first",
        )
