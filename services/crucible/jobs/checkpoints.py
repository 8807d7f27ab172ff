"""Trainer checkpoints as the jobs use them: the `meta` a trainer registers with its
checkpoints, and the model of a registered checkpoint rebuilt from that meta and loaded,
digest-checked, through the SDK."""

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from crucible.config.model_source import ModelSourceError, ModelSpec, as_model_spec
from crucible.config.parse import SECTIONS, ConfigError, build_model_spec, validated
from crucible.config.workload import ModelConfig, TaskConfig

if TYPE_CHECKING:
    import torch

    from crucible.models.hf import LanguageModel
    from crucible.models.tokenizer import Tokenizer
    from crucible.schemas.lineage import CheckpointPublic
    from crucible.sdk.artifacts import InputArtifact

log = logging.getLogger("crucible.jobs")


class CheckpointSource(Protocol):
    """Where a checkpoint's model is read from: a `crucible.sdk.Run` inside a job (which
    records what it read as the run's inputs), or a `crucible.sdk.reader.CheckpointReader`
    outside one."""

    def get_checkpoint(self, checkpoint_id: int) -> "CheckpointPublic": ...

    def input_artifact(self, ref: str) -> "InputArtifact": ...

    def load_checkpoint(self, state: Mapping[str, Any], *, checkpoint_id: int) -> int | None: ...


def checkpoint_meta(model: ModelConfig | ModelSpec, task: TaskConfig, mode: str) -> dict[str, Any]:
    """What a trainer checkpoint carries so that evals and rollouts can rebuild its model."""
    meta_model = as_model_spec(model).to_meta()
    return {"model": meta_model, "task": dataclasses.asdict(task), "mode": mode}


def model_spec_from_meta(checkpoint_id: int, meta: Mapping[str, Any]) -> ModelSpec | None:
    """The model a trainer checkpoint was written with (its `meta.model`), if any."""
    meta_model = meta.get("model")
    if meta_model is None:
        return None
    where = f"checkpoint {checkpoint_id} meta.model"
    return build_model_spec(validated(SECTIONS["model"], where, meta_model), where)


def model_spec_of(record: "CheckpointPublic", fallback: ModelSpec | None) -> ModelSpec:
    """The model of a checkpoint: its `meta.model`, else `fallback`."""
    spec = model_spec_from_meta(record.id, record.meta) or fallback
    if spec is None:
        raise ConfigError(
            f"checkpoint {record.id} has no model in its meta (it was not written by "
            "crucible.jobs.train); give it as config.model"
        )
    return spec


def checked_tokenizer(spec: ModelSpec) -> "Tokenizer":
    """The model's tokenizer, after reading what the model's files say of it (config.json,
    the tokenizer's files): a model or tokenizer that cannot be used is a ConfigError, before
    any weights are read."""
    from crucible.models.build import build_tokenizer
    from crucible.models.hf import hf_config
    from crucible.models.hf_tokenizer import TokenizerError

    try:
        if spec.hf is not None:
            hf_config(spec.hf)
        return build_tokenizer(spec)
    except (ModelSourceError, TokenizerError) as exc:
        raise ConfigError(f"config.model: {exc}") from None


def load_weights(
    run: CheckpointSource, record: "CheckpointPublic", state: dict[str, "torch.Tensor"]
) -> None:
    """Fill `state` (a model state dict) with the weights of trainer checkpoint `record`,
    digest-checked, without its optimizer state."""
    from crucible.training.train import model_only

    run.load_checkpoint(model_only(state), checkpoint_id=record.id)


def load_model(
    run: CheckpointSource,
    checkpoint_id: int,
    *,
    device: "torch.device",
    fallback: ModelSpec | None = None,
) -> tuple["LanguageModel", "Tokenizer", "CheckpointPublic"]:
    """The model of a registered trainer checkpoint (rebuilt from its meta) in eval mode,
    its tokenizer, and the checkpoint."""
    from crucible.jobs.artifacts import resolve_model, run_fetch
    from crucible.models.build import build_from_spec

    record = run.get_checkpoint(checkpoint_id)
    # The meta names artifacts by id, which is what the run reads.
    spec = resolve_model(model_spec_of(record, fallback), run_fetch(run, {})).local
    tokenizer = checked_tokenizer(spec)
    model = build_from_spec(spec, device=device)
    state = model.state_dict()
    load_weights(run, record, state)
    model.load_state_dict(state)
    log.info("model of checkpoint %d (run %d, step %d)", record.id, record.run_id, record.step)
    return model.eval(), tokenizer, record
