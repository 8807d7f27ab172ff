"""Which model a workload trains, samples from or evaluates, and its tokenizer: the built-in
GPT of a shape (`ModelConfig`) with the byte tokenizer, or a Hugging Face causal LM
(`HFModelSource`) with the tokenizer of its directory or one named on its own.

A `ModelSpec` is also what a trainer checkpoint records in its meta (`to_meta`), so that
rollouts, evals and the next training stage rebuild the same model (`from_meta`) and load
the checkpoint's weights into it. Building what a spec names is `models/build.py`'s: a spec
is plain data, read by the control plane and the jobs' config checks without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crucible.config.workload import ModelConfig

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""What a Hugging Face model directory must hold besides config.json (safetensors only: a
pickled `pytorch_model.bin` can run code when loaded, so it is refused)."""


class ModelSourceError(ValueError):
    """A model directory or architecture that cannot give a model; the message names it."""


@dataclass(frozen=True)
class HFModelSource:
    """Where a Hugging Face model comes from: a directory, or an architecture and its config."""

    path: str | None = None
    """A local Hugging Face model directory (config.json and safetensors weights)."""

    architecture: str | None = None
    """A transformers `model_type` ("llama", "qwen2", "gpt2", ...) to build with random
    weights from `config`; exclusive with `path`."""

    config: Mapping[str, Any] = field(default_factory=dict)
    """The architecture's config fields (e.g. hidden_size, num_hidden_layers); with `path`,
    fields that override the directory's config.json (e.g. a longer max_position_embeddings
    is refused by the weights, a dropout is not)."""

    def __post_init__(self) -> None:
        if (self.path is None) == (self.architecture is None):
            raise ModelSourceError("a Hugging Face model needs exactly one of path or architecture")


@dataclass(frozen=True)
class ModelSpec:
    gpt: ModelConfig | None = None
    """The built-in GPT of this shape."""

    hf: HFModelSource | None = None
    """A Hugging Face causal LM; exclusive with `gpt`."""

    tokenizer: str | None = None
    """A tokenizer directory; by default the byte tokenizer for the GPT and for a Hugging
    Face model built from an architecture, the model directory's own for one read from a
    directory."""

    def __post_init__(self) -> None:
        if (self.gpt is None) == (self.hf is None):
            raise ValueError("a model is either the built-in GPT or a Hugging Face model")

    @property
    def name(self) -> str:
        if self.hf is None:
            return "the built-in GPT"
        return f"Hugging Face {self.hf.path or self.hf.architecture}"

    def to_meta(self) -> dict[str, Any]:
        """The checkpoint meta's `model`: the GPT's fields, or `{"hf": ..., "tokenizer": ...}`."""
        if self.gpt is not None:
            meta = dataclasses.asdict(self.gpt)
        else:
            assert self.hf is not None
            source = {"path": self.hf.path, "architecture": self.hf.architecture}
            meta = {"hf": {k: v for k, v in source.items() if v} | {"config": dict(self.hf.config)}}
        if self.tokenizer is not None:
            meta["tokenizer"] = self.tokenizer
        return meta

    @classmethod
    def from_meta_hf(cls, meta: Mapping[str, Any]) -> ModelSpec:
        """The spec of a checkpoint meta's `model` that names a Hugging Face model."""
        hf = meta["hf"]
        source = HFModelSource(
            path=hf.get("path"), architecture=hf.get("architecture"), config=hf.get("config", {})
        )
        return cls(hf=source, tokenizer=meta.get("tokenizer"))


def as_model_spec(model: ModelConfig | ModelSpec) -> ModelSpec:
    """Callers that only know the GPT pass its ModelConfig."""
    return model if isinstance(model, ModelSpec) else ModelSpec(gpt=model)
