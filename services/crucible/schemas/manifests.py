"""A manifest checked as its submission would be, with nothing submitted: what the
dashboard's editor asks as the user types."""

from typing import Any

from pydantic import Field

from crucible.schemas.common import ApiModel, PublicModel


class ManifestCheck(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    manifest: Any = Field(
        description="Any JSON, as parsed from the editor's YAML: a TrainingRun, RolloutJob, "
        "EvalJob or Sweep is checked as `POST /runs` or `POST /sweeps` would check it."
    )


class ManifestProblem(PublicModel):
    path: str = Field(
        description="Where in the manifest, as keys and list indexes joined by dots "
        "(`spec.config.train.lr`, `spec.inputs.0.dataset`); empty for the manifest itself."
    )
    message: str


class ManifestValidation(PublicModel):
    valid: bool
    errors: list[ManifestProblem] = Field(description="Every problem found; empty when valid.")
