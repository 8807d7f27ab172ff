"""Artifacts a job's model names (`config.model.tokenizer: "artifact:chat-bpe"`, or
`config.model.hf.path: "artifact:12"`): resolved to their verified local files and recorded
as inputs of the run, so lineage runs from a tokenizer to what was trained with it.

A name resolves to the artifact the control plane pinned for it (CRUCIBLE_INPUTS.artifacts)
when it did, so every attempt reads the same one. What a checkpoint's meta records is the
reference by id (`artifact:12`): the rollouts, evals and next stages that rebuild the model
read exactly that artifact wherever they run, even after a newer one took the name.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from crucible.config.model_source import ModelSpec
from crucible.config.parse import ConfigError
from crucible.domain.artifact_refs import ARTIFACT_SCHEME

if TYPE_CHECKING:
    from crucible.sdk.artifacts import InputArtifact


class ArtifactSource(Protocol):
    """What artifacts are read through: a `crucible.sdk.Run` (which records them as the
    run's inputs) or a checkpoint reader (`checkpoints.CheckpointSource`)."""

    def input_artifact(self, ref: str) -> "InputArtifact": ...


Fetch = Callable[[str], "InputArtifact"]
"""An artifact's id or name -> the artifact and its verified local files."""


@dataclass(frozen=True)
class ResolvedModel:
    local: ModelSpec
    """What the job builds: each artifact reference replaced by its local directory."""

    pinned: ModelSpec
    """What the checkpoint meta records: each reference by the artifact's id."""


def run_fetch(run: ArtifactSource, pinned: Mapping[str, int]) -> Fetch:
    """Artifacts as a run reads them: the one the control plane pinned for a reference (else
    the reference as it stands), verified and recorded as an input."""
    return lambda ref: run.input_artifact(str(pinned.get(ref, ref)))


def resolve_model(spec: ModelSpec, fetch: Fetch) -> ResolvedModel:
    """`spec` with its artifact references resolved (unchanged when it has none)."""
    tokenizer = _resolve(spec.tokenizer, fetch, "config.model.tokenizer")
    local, pinned = replace(spec, tokenizer=tokenizer[0]), replace(spec, tokenizer=tokenizer[1])
    if spec.hf is not None and spec.hf.path is not None:
        path = _resolve(spec.hf.path, fetch, "config.model.hf.path")
        local = replace(local, hf=replace(spec.hf, path=path[0]))
        pinned = replace(pinned, hf=replace(spec.hf, path=path[1]))
    return ResolvedModel(local, pinned)


def _resolve(value: str | None, fetch: Fetch, where: str) -> tuple[str | None, str | None]:
    """(local directory, reference by id) of `value`; a plain path stays as it is."""
    if value is None or not value.startswith(ARTIFACT_SCHEME):
        return value, value
    from crucible.client import ApiError
    from crucible.sdk.artifacts import ArtifactNotFound

    ref = value.removeprefix(ARTIFACT_SCHEME)
    try:
        fetched = fetch(ref)
    except ArtifactNotFound as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ApiError as exc:
        if exc.status == 404:
            raise ConfigError(f"{where}: no artifact {ref} ({exc})") from None
        raise
    return str(fetched.path), f"{ARTIFACT_SCHEME}{fetched.artifact.id}"
