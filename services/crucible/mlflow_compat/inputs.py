"""log-inputs: each MLflow dataset becomes a version of a Crucible dataset of the same name,
read by the run (a `consumed_by` edge in lineage), its MLflow description kept with it."""

import hashlib
import json
import re
from typing import Any

from sqlalchemy.orm import Session

from crucible.core.datasets import register_version
from crucible.core.lineage import link_input
from crucible.db.tables import Project
from crucible.mlflow_compat import runs
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.errors import invalid
from crucible.mlflow_compat.fields import key_values, text
from crucible.mlflow_compat.limits import check_length
from crucible.schemas.lineage import DatasetVersionCreate, RunInputCreate

MAX_DATASETS_PER_BATCH = 1000
MAX_DATASET_NAME_SIZE = 500
MAX_DATASET_DIGEST_SIZE = 36
MAX_DATASET_SOURCE_SIZE = 65535


def log_inputs(
    session: Session, caller: Caller, run_id: str, datasets: list[dict[str, Any]]
) -> None:
    if len(datasets) > MAX_DATASETS_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_DATASETS_PER_BATCH} datasets. "
            f"Got {len(datasets)}."
        )
    described = [_described(item) for item in datasets]
    run = runs.load_active(session, caller, run_id)
    project = session.get_one(Project, run.project_id)
    for mlflow_dataset, input_tags in described:
        canonical = json.dumps(mlflow_dataset, sort_keys=True).encode()
        version = register_version(
            session=session,
            principal=caller.principal,
            version_in=DatasetVersionCreate.model_validate(
                {
                    "project": project.name,
                    "name": _crucible_name(mlflow_dataset["name"]),
                    "uri": _uri(mlflow_dataset),
                    "digest": "sha256:" + hashlib.sha256(canonical).hexdigest(),
                    "schema": {"mlflow": {"dataset": mlflow_dataset, "input_tags": input_tags}},
                }
            ),
        )
        link_input(
            session=session,
            principal=caller.principal,
            run_id=run.id,
            input_in=RunInputCreate(dataset_version_id=version.id),
        )


def _described(item: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    dataset = item.get("dataset")
    if not isinstance(dataset, dict):
        raise invalid(f"Invalid dataset input {item!r}: it needs a 'dataset'")
    fields = {
        name: text(dataset, name, required=name in ("name", "digest", "source_type", "source"))
        for name in ("name", "digest", "source_type", "source", "schema", "profile")
    }
    for name, most in (
        ("name", MAX_DATASET_NAME_SIZE),
        ("digest", MAX_DATASET_DIGEST_SIZE),
        ("source", MAX_DATASET_SOURCE_SIZE),
    ):
        check_length(f"Dataset {name}", fields[name], most)
    tags = [{"key": k, "value": v} for k, v in key_values(item, "tags")]
    return fields, tags


def _crucible_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:128]
    return cleaned if cleaned and cleaned[0].isalnum() else f"mlflow-{cleaned}"[:128]


def _uri(dataset: dict[str, str]) -> str:
    """Where the data lives when its source says so (a URL or path), else a name for where
    it came from: a DataFrame in code has no location."""
    try:
        source = json.loads(dataset["source"])
    except ValueError:
        source = {}
    if isinstance(source, dict):
        for key in ("url", "uri", "path"):
            value = source.get(key)
            if isinstance(value, str) and re.match(r"^(s3|gs|file|https?)://[^\s\\]+$", value):
                return value
    return f"mlflow-dataset:{re.sub(r'[^A-Za-z0-9._-]', '-', dataset['source_type'])}"
