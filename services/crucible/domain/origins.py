"""Runs no Crucible backend executes: an MLflow client created them and reports their end."""

from collections.abc import Mapping
from typing import Any, Final

from crucible.domain.resources import ANNOTATION_ORIGIN

ORIGIN_ANNOTATION: Final = ANNOTATION_ORIGIN
ORIGIN_MLFLOW: Final = "mlflow"


def is_from_mlflow(manifest: Mapping[str, Any]) -> bool:
    annotations = manifest.get("metadata", {}).get("annotations", {})
    return bool(annotations.get(ORIGIN_ANNOTATION) == ORIGIN_MLFLOW)
