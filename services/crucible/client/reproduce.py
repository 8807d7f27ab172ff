"""`crucible runs reproduce`: the submission that runs a finished run again exactly, or the
reason it cannot. Exactly means the spec as it was resolved (every `@latest`, `producedBy`
and checkpoint-by-name replaced by the version the run read), the image digest its pods ran
(Kubernetes), or the same commit and uncommitted changes of its code's directory (local). A
code package (`codePackage`) is pinned by its artifact id; for a run with a command of its
own, it stands for that directory.
"""

import copy
from typing import Any

from crucible.client.provenance import differences
from crucible.domain.artifact_refs import pin_artifact_refs
from crucible.domain.enums import Backend
from crucible.domain.errors import CrucibleError
from crucible.domain.resources import TAG_PREFIX, TAG_REPRODUCES
from crucible.domain.specs import MAX_RUN_NAME
from crucible.schemas.provenance import CodeSource
from crucible.schemas.runs import AttemptPublic, RunPublic, RunSubmit


class CannotReproduce(CrucibleError):
    pass


def reproduction_name(name: str, number: int) -> str:
    """`<name>-r<number>`, the name shortened to keep within the run-name limit."""
    suffix = f"-r{number}"
    return name[: MAX_RUN_NAME - len(suffix)].rstrip("-") + suffix


def reproduction(
    run: RunPublic,
    attempts: list[AttemptPublic],
    *,
    project: str,
    name: str,
    current_code: CodeSource | None,
) -> RunSubmit:
    """The submission of the reproduction, checked against `current_code`: the state of the
    code the local executor would run now (unused for Kubernetes, where the image is)."""
    if run.resolved_inputs is None:
        raise CannotReproduce(
            f"run {run.id} never resolved its inputs (it is {run.phase}), so which versions it "
            "read is not known"
        )
    manifest = copy.deepcopy(run.manifest)
    manifest["metadata"]["name"] = name
    spec: dict[str, Any] = manifest["spec"]
    _pin_inputs(run.kind, spec, run.resolved_inputs)
    code = run.code
    if run.backend == Backend.kubernetes.value:
        spec["image"] = _image_that_ran(run, attempts)
    else:
        code = _same_code(run, current_code)
        if (
            code is not None
            and run.code is not None
            and spec.get("workingDir") == (run.code.directory)
        ):
            spec["workingDir"] = code.directory  # the same code, checked out elsewhere
    tags = {k: v for k, v in run.tags.items() if not k.startswith(TAG_PREFIX)}
    tags[TAG_REPRODUCES] = str(run.id)
    return RunSubmit(
        project=project,
        manifest=manifest,  # validated into a Manifest by RunSubmit
        backend=Backend(run.backend),
        tags=tags,
        code_ref=run.code_ref,
        code=code,
    )


def _pin_inputs(kind: str, spec: dict[str, Any], pinned: dict[str, Any]) -> None:
    datasets = list(pinned.get("datasets") or [])
    checkpoint = pinned.get("checkpoint")
    if pinned.get("artifacts") and spec.get("config") is not None:
        spec["config"] = pin_artifact_refs(spec["config"], pinned["artifacts"])
    if pinned.get("artifacts") and spec.get("codePackage"):
        spec["codePackage"] = pin_artifact_refs(spec["codePackage"], pinned["artifacts"])
    if kind == "train":
        spec["inputs"] = [
            _pinned_dataset(item, ref) for item, ref in _zip(spec, "inputs", datasets)
        ]
        if spec.get("initFrom") is not None:
            spec["initFrom"] = {"id": checkpoint}
    elif kind == "rollout":
        if spec.get("prompts") is not None:
            spec["prompts"] = _pinned_dataset(spec["prompts"], datasets[0])
        if (spec.get("policy") or {}).get("checkpoint") is not None:
            spec["policy"] = {"checkpoint": {"id": checkpoint}}
    elif kind == "eval":
        spec["checkpoint"] = {"id": checkpoint}


def _zip(spec: dict[str, Any], key: str, refs: list[str]) -> list[tuple[dict[str, Any], str]]:
    items: list[dict[str, Any]] = list(spec.get(key) or [])
    if len(items) != len(refs):
        raise CannotReproduce(
            f"the run pinned {len(refs)} datasets for its {len(items)} inputs; its record is "
            "inconsistent"
        )
    return list(zip(items, refs, strict=True))


def _pinned_dataset(item: dict[str, Any], ref: str) -> dict[str, Any]:
    return {"dataset": ref, **({"mountAs": item["mountAs"]} if item.get("mountAs") else {})}


def _image_that_ran(run: RunPublic, attempts: list[AttemptPublic]) -> str:
    ran = next((a for a in attempts if a.image_id), None)
    if ran is None or ran.image_id is None:
        raise CannotReproduce(
            f"no pod of run {run.id} was seen running, so the image digest it ran is not known"
        )
    if "@sha256:" in ran.image_id:
        return ran.image_id  # a repository digest: the same bytes wherever it is pulled
    raise CannotReproduce(
        f"run {run.id} ran image {ran.image} with id {ran.image_id!r}, which names no "
        "repository digest, so no reference can pin it"
    )


def _same_code(run: RunPublic, current: CodeSource | None) -> CodeSource | None:
    recorded = run.code
    if recorded is None:
        raise CannotReproduce(
            f"run {run.id} was submitted without a record of its code (an older client, or "
            "one that sets none), so the code to run cannot be told"
        )
    if current is None:
        raise CannotReproduce(f"run {run.id}'s code directory {recorded.directory} is not here")
    if recorded.package is not None and run.manifest["spec"].get("command"):
        # The command's code is the package, which the spec pins by artifact id and every
        # start checks by digest: only what is installed here must still match.
        found = differences(recorded.model_copy(update={"git": None}), current)
        if found:
            raise CannotReproduce(f"run {run.id}'s code cannot be had here: " + "; ".join(found))
        return recorded
    if recorded.git is None and run.manifest["spec"].get("command"):
        raise CannotReproduce(
            f"run {run.id}'s code in {recorded.directory} was not in a git work tree, so "
            "there is no commit to check it against"
        )
    found = differences(recorded, current)
    if found:
        raise CannotReproduce(
            f"run {run.id}'s code cannot be had here: " + "; ".join(found) + ". Check out "
            "that state (or pass --code-dir to a checkout of it) and try again."
        )
    return current
