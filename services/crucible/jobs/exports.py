"""A registered checkpoint written out as a Hugging Face model directory, and registered as
a `model` artifact derived from it, so lineage runs from the data to the exported model.

`crucible checkpoints export` runs `export_checkpoint`; the train job, with
`config.train.export_hf`, runs `export_final_checkpoint` after its last step. What either
reads is digest-checked like any load.
"""

import logging
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crucible.config.model_source import ModelSpec
from crucible.jobs.artifacts import Fetch, resolve_model
from crucible.jobs.checkpoints import checked_tokenizer, model_spec_of

if TYPE_CHECKING:
    import torch

    from crucible.client import CrucibleClient
    from crucible.schemas.lineage import ArtifactPublic, CheckpointPublic
    from crucible.sdk import Run

log = logging.getLogger("crucible.jobs.export")

LoadWeights = Callable[[dict[str, "torch.Tensor"], "CheckpointPublic"], None]
"""Fill a model state dict with a checkpoint's weights, digest-checked."""


@dataclass(frozen=True)
class Exported:
    checkpoint: "CheckpointPublic"
    directory: Path
    artifact: "ArtifactPublic | None"
    """None when not registered."""


def export_checkpoint(
    client: "CrucibleClient",
    checkpoint_id: int,
    directory: Path,
    *,
    project: str,
    name: str | None = None,
    register: bool = True,
) -> Exported:
    """Write checkpoint `checkpoint_id` to `directory` (which must not exist or be empty)
    and, with `register`, record it as an artifact of `project` named `name` (default
    `<run>-step<step>-hf`)."""
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; export into a new directory")
    record = client.get_checkpoint(checkpoint_id)
    spec = resolve_model(model_spec_of(record, None), _client_fetch(client, project)).local

    def load(state: dict[str, "torch.Tensor"], record: "CheckpointPublic") -> None:
        from crucible.sdk.checkpoint import CheckpointStore
        from crucible.training.train import model_only

        store = CheckpointStore(client, run_id=record.run_id, attempt=None, base_uri=record.uri)
        store.load(model_only(state), None, checkpoint_id=record.id)

    write_export(record, spec, load, directory)
    if not register:
        return Exported(record, directory, None)
    from crucible.artifacts.digest import content_of
    from crucible.schemas.lineage import ArtifactCreate

    run = client.get_run(record.run_id)
    content = content_of(directory)
    artifact = client.register_artifact(
        ArtifactCreate.model_validate(
            {
                "project": project,
                "kind": "model",
                "name": name or f"{run.name}-step{record.step}-hf",
                "uri": directory.resolve().as_uri(),
                "digest": content.digest,
                "size_bytes": content.size_bytes,
                "meta": export_meta(record),
                "sources": [{"type": "checkpoint", "id": record.id}],
            }
        )
    )
    return Exported(record, directory, artifact)


def export_final_checkpoint(
    run: "Run", spec: ModelSpec, weights: dict[str, "torch.Tensor"]
) -> Exported:
    """The run's latest checkpoint (its last step's), written under the run's outputs and
    published as a `model` artifact derived from it. `spec`: the model, artifacts resolved;
    `weights`: the trainer's final weights, which that checkpoint holds."""
    record = run.latest_checkpoint()
    if record is None:
        raise RuntimeError(f"run {run.id} has no checkpoint to export")
    suffix = f".attempt-{run.attempt}" if run.attempt is not None else ""
    name = f"{run.name}-step{record.step}-hf"
    directory = run.outputs_dir / f"{name}{suffix}"
    shutil.rmtree(directory, ignore_errors=True)  # this attempt's own, never registered

    def load(state: dict[str, "torch.Tensor"], record: "CheckpointPublic") -> None:
        del record  # its weights are the ones in memory
        state.update(weights)

    write_export(record, spec, load, directory)
    artifact = run.publish_artifact(
        "model",
        name,
        directory,
        sources=[{"type": "checkpoint", "id": record.id}],
        meta=export_meta(record),
    )
    log.info("registered model artifact %d (%s, %s)", artifact.id, artifact.name, artifact.digest)
    return Exported(record, directory, artifact)


def write_export(
    record: "CheckpointPublic", spec: ModelSpec, load: LoadWeights, directory: Path
) -> None:
    """The checkpoint's model (built from `spec`, weights from `load`) as a Hugging Face
    directory at `directory`, written beside it and renamed into place: a crash leaves no
    half directory under the name a user (or a registration) would trust."""
    tokenizer = checked_tokenizer(spec)

    # torch only once the request is known to be good: its import is seconds.
    import torch

    from crucible.models.build import build_from_spec
    from crucible.training.export import export_model

    # DCP says so on every load outside a process group; one process is the point here.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
    model = build_from_spec(spec, device=torch.device("cpu"))
    state = model.state_dict()
    load(state, record)
    model.load_state_dict(state)
    partial = directory.with_name(directory.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)  # a crashed export's, ours to drop
    export_model(model.eval(), tokenizer, partial)
    if directory.exists():
        directory.rmdir()  # empty, checked by the caller
    partial.rename(directory)
    log.info(
        "exported checkpoint %d (run %d, step %d) to %s",
        record.id,
        record.run_id,
        record.step,
        directory,
    )


def export_meta(record: "CheckpointPublic") -> dict[str, Any]:
    return {"format": "huggingface", "model": record.meta.get("model")}


def _client_fetch(client: "CrucibleClient", project: str) -> Fetch:
    """Artifacts as the CLI reads them: verified, cached under CRUCIBLE_HOME, no run."""
    from crucible.sdk.artifacts import fetch
    from crucible.settings import load_settings

    cache_dir = load_settings().home / "artifacts"
    return lambda ref: fetch(client, project=project, ref=ref, cache_dir=cache_dir)
