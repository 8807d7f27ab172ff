"""Artifacts a job's model names (`config.model.tokenizer: "artifact:chat-bpe"`, or
`config.model.hf.path: "artifact:12"`): resolved to their verified local files and recorded
as inputs of the run, so lineage runs from a tokenizer to what was trained with it.

The reference stays in the checkpoint's meta, so the rollouts, evals and next stages that
rebuild the model resolve it again (and record it too) wherever they run.
"""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from crucible.workloads.jobs.config import ConfigError
from crucible.workloads.model_spec import ModelSpec

if TYPE_CHECKING:
    from crucible.sdk import Run

ARTIFACT_SCHEME = "artifact:"

Fetch = Callable[[str], Path]
"""An artifact's id or name -> the directory of its verified files."""


def run_fetch(run: "Run") -> Fetch:
    """Artifacts as a run reads them: verified and recorded as its inputs."""
    return lambda ref: run.input_artifact(ref).path


def with_local_artifacts(spec: ModelSpec, fetch: Fetch) -> ModelSpec:
    """`spec` with each `artifact:<ref>` replaced by the artifact's local directory."""
    tokenizer = _local(spec.tokenizer, fetch, "config.model.tokenizer")
    hf = spec.hf
    if hf is not None and hf.path is not None:
        hf = replace(hf, path=_local(hf.path, fetch, "config.model.hf.path"))
    return replace(spec, tokenizer=tokenizer, hf=hf)


def _local(value: str | None, fetch: Fetch, where: str) -> str | None:
    if value is None or not value.startswith(ARTIFACT_SCHEME):
        return value
    from crucible.client import ApiError
    from crucible.sdk.artifacts import ArtifactNotFound

    ref = value.removeprefix(ARTIFACT_SCHEME)
    try:
        return str(fetch(ref))
    except ArtifactNotFound as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ApiError as exc:
        if exc.status == 404:
            raise ConfigError(f"{where}: no artifact {ref} ({exc})") from None
        raise
