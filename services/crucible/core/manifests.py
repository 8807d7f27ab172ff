"""A manifest checked as its submission would check it, writing nothing: the schema of
`POST /runs` (RunSubmit) or `POST /sweeps` (SweepSubmit, then `sweeps.check_sweep`, which
tries every trial's config). The dashboard's editor asks as the user types."""

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lookups import project_by_name
from crucible.core.sweeps import check_sweep
from crucible.domain.enums import Role
from crucible.domain.errors import InvalidInput
from crucible.schemas.common import ApiModel
from crucible.schemas.manifests import ManifestCheck, ManifestProblem, ManifestValidation
from crucible.schemas.runs import RunSubmit
from crucible.schemas.sweeps import SweepSubmit

SUBMISSION_OF_KIND: dict[str, type[ApiModel]] = {
    "TrainingRun": RunSubmit,
    "RolloutJob": RunSubmit,
    "EvalJob": RunSubmit,
    "Sweep": SweepSubmit,
}


def validate_manifest(
    *, session: Session, principal: Principal, check: ManifestCheck
) -> ManifestValidation:
    project = project_by_name(session, check.project)
    principal.require(project.id, Role.viewer, entity="project", key=check.project)
    problems = manifest_problems(check.project, check.manifest)
    return ManifestValidation(valid=not problems, errors=problems)


def manifest_problems(project: str, manifest: Any) -> list[ManifestProblem]:
    """Every problem its submission to `project` would be refused for, each at its path."""
    if not isinstance(manifest, dict):
        return [
            ManifestProblem(
                path="", message="a manifest is a mapping of apiVersion, kind, metadata and spec"
            )
        ]
    kind = manifest.get("kind")
    submission = SUBMISSION_OF_KIND.get(kind) if isinstance(kind, str) else None
    if submission is None:
        kinds = ", ".join(SUBMISSION_OF_KIND)
        return [ManifestProblem(path="kind", message=f"kind is one of {kinds}; got {kind!r}")]
    try:
        submitted = submission.model_validate({"project": project, "manifest": manifest})
    except ValidationError as error:
        return [
            ManifestProblem(path=_path(manifest, detail), message=detail["msg"])
            for detail in error.errors()
            if detail["loc"][:1] == ("manifest",)
        ]
    if isinstance(submitted, SweepSubmit):
        try:
            check_sweep(submitted.manifest)
        except InvalidInput as error:
            path = error.field.removeprefix("manifest").removeprefix(".")
            return [ManifestProblem(path=path, message=error.message)]
    return []


def _path(manifest: dict[str, Any], detail: ErrorDetails) -> str:
    """The error's location as keys of the manifest. Pydantic's location also names the
    union member it tried (`TrainingRun`, `str`), which is no key of the document, so only
    what the document holds is kept, and, for a missing field, the field's name."""
    loc: Sequence[int | str] = detail["loc"][1:]
    parts: list[str] = []
    node: Any = manifest
    for index, item in enumerate(loc):
        if _holds(node, item):
            node = node[item]
        elif index == len(loc) - 1 and detail["type"] == "missing":
            node = None
        else:
            continue
        parts.append(str(item))
    return ".".join(parts)


def _holds(node: Any, item: int | str) -> bool:
    if isinstance(node, dict):
        return item in node
    return isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node)
