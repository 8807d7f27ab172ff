"""Trainer checkpoints as the jobs use them: the `meta` a trainer registers with its
checkpoints, and the model of a registered checkpoint rebuilt from that meta and loaded,
digest-checked, through the SDK."""

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crucible.workloads.config import ModelConfig, TaskConfig
from crucible.workloads.jobs.config import SECTIONS, ConfigError, build_model_config, validated

if TYPE_CHECKING:
    import torch

    from crucible.schemas.lineage import CheckpointPublic
    from crucible.sdk import Run
    from crucible.workloads.model import GPT

log = logging.getLogger("crucible.workloads")


def checkpoint_meta(model: ModelConfig, task: TaskConfig, mode: str) -> dict[str, Any]:
    """What a trainer checkpoint carries so that evals and rollouts can rebuild its model."""
    return {"model": dataclasses.asdict(model), "task": dataclasses.asdict(task), "mode": mode}


def model_config_from_meta(checkpoint_id: int, meta: Mapping[str, Any]) -> ModelConfig | None:
    """The model shape a trainer checkpoint was written with (its `meta.model`), if any."""
    meta_model = meta.get("model")
    if meta_model is None:
        return None
    where = f"checkpoint {checkpoint_id} meta.model"
    return build_model_config(validated(SECTIONS["model"], where, meta_model), where)


def model_config_of(record: "CheckpointPublic", fallback: ModelConfig | None) -> ModelConfig:
    """The model shape of a checkpoint: its `meta.model`, else `fallback`."""
    config = model_config_from_meta(record.id, record.meta) or fallback
    if config is None:
        raise ConfigError(
            f"checkpoint {record.id} has no model shape in its meta (it was not written by "
            "crucible.workloads.jobs.train); give it as config.model"
        )
    return config


def model_template(config: ModelConfig) -> dict[str, "torch.Tensor"]:
    """Empty CPU tensors shaped like the model's state dict, for DCP to load into, without
    initialising a model."""
    import torch

    from crucible.workloads.model import GPT

    with torch.device("meta"):
        shapes = GPT(config).state_dict()
    return {k: torch.empty(v.shape, dtype=v.dtype) for k, v in shapes.items()}


def load_weights(run: "Run", record: "CheckpointPublic", state: dict[str, "torch.Tensor"]) -> None:
    """Fill `state` (a model state dict) with the weights of trainer checkpoint `record`,
    digest-checked, without its optimizer state."""
    from crucible.workloads.train import model_only

    run.load_checkpoint(model_only(state), checkpoint_id=record.id)


def load_model(
    run: "Run",
    checkpoint_id: int,
    *,
    device: "torch.device",
    fallback: ModelConfig | None = None,
) -> tuple["GPT", "CheckpointPublic"]:
    """The model of a registered trainer checkpoint (shape from its meta), in eval mode."""
    from crucible.workloads.model import build_model

    record = run.get_checkpoint(checkpoint_id)
    model = build_model(model_config_of(record, fallback), device=device)
    state = model.state_dict()
    load_weights(run, record, state)
    model.load_state_dict(state)
    log.info("model of checkpoint %d (run %d, step %d)", record.id, record.run_id, record.step)
    return model.eval(), record
