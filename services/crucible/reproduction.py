"""The submission that runs a finished run again exactly, or the reason it cannot: what
`crucible runs reproduce` submits, and what `GET /runs/{id}/reproduction` answers for the
dashboard (core/reproductions.py).

Exactly means the spec as it was resolved (every `@latest`, `producedBy` and
checkpoint-by-name replaced by the version the run read), the image digest its pods ran
(Kubernetes), or the same commit and uncommitted changes of its code's directory (local). A
code package (`codePackage`) is pinned by its artifact id; for a run with a command of its
own, it stands for that directory.

The local backend runs code from the machine it runs on, so the code to check is that
machine's: the CLI's when it submits, the server's when the dashboard asks.
"""

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crucible import provenance
from crucible.domain.artifact_refs import pin_artifact_refs
from crucible.domain.enums import Backend
from crucible.domain.errors import Conflict
from crucible.domain.resources import TAG_PREFIX, TAG_REPRODUCES
from crucible.domain.specs import MAX_RUN_NAME
from crucible.schemas.provenance import CodeSource
from crucible.schemas.runs import AttemptPublic, RunPublic, RunSubmit


class CannotReproduce(Conflict):
    """The run's record, or the code here, cannot give back what it ran (409 in the API)."""


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
        found = provenance.differences(recorded.model_copy(update={"git": None}), current)
        if found:
            raise CannotReproduce(f"run {run.id}'s code cannot be had here: " + "; ".join(found))
        return recorded
    if recorded.git is None and run.manifest["spec"].get("command"):
        raise CannotReproduce(
            f"run {run.id}'s code in {recorded.directory} was not in a git work tree, so "
            "there is no commit to check it against"
        )
    found = provenance.differences(recorded, current)
    if found:
        raise CannotReproduce(
            f"run {run.id}'s code cannot be had here: " + "; ".join(found) + ". Check out "
            "that state (or pass --code-dir to a checkout of it) and try again."
        )
    return current


def current_code(run: RunPublic, code_dir: Path | None = None) -> CodeSource | None:
    """The state, on this machine, of the code a local reproduction of `run` would run:
    that of `code_dir`, else of the directory the run's code was recorded in (the reference
    workloads' for a run without a command of its own); None where there is none (or for a
    Kubernetes run, whose image is its code)."""
    if run.backend != Backend.local.value or run.code is None:
        return None
    if code_dir is not None:
        directory = code_dir
    elif run.manifest["spec"].get("command"):
        directory = Path(run.code.directory)
    else:
        directory = provenance.reference_code_directory()
    if run.code.package is not None and run.manifest["spec"].get("command"):
        # The package is the command's code: only what is installed here counts.
        return CodeSource(directory=str(directory), packages=provenance.installed_packages())
    if directory.is_dir():
        return provenance.capture(directory)
    return None


def refuse_deleted_checkpoints(
    run: RunPublic, request: RunSubmit, is_deleted: Callable[[int], bool]
) -> None:
    """CannotReproduce when a checkpoint the reproduction reads was deleted by retention."""
    pinned = request.manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    for checkpoint_id in pinned_checkpoints(pinned["spec"]):
        if is_deleted(checkpoint_id):
            raise CannotReproduce(
                f"checkpoint {checkpoint_id}, which run {run.id} read, was deleted by "
                "retention; the run cannot be reproduced"
            )


def pinned_checkpoints(spec: dict[str, Any]) -> list[int]:
    refs = [
        spec.get("initFrom"),
        (spec.get("policy") or {}).get("checkpoint"),
        spec.get("checkpoint"),
    ]
    return [int(ref["id"]) for ref in refs if isinstance(ref, dict) and ref.get("id")]
