"""The model and tokenizer a `ModelSpec` names, built: the GPT of its shape or the Hugging
Face model, and the byte tokenizer or a tokenizer directory checked to fit the model."""

from pathlib import Path

import torch

from crucible.config.model_source import ModelSpec
from crucible.models.gpt import build_model
from crucible.models.hf import LanguageModel, build_hf_model, hf_config
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.models.tokenizer import ByteTokenizer, Tokenizer


def build_from_spec(spec: ModelSpec, *, device: torch.device | str = "cpu") -> LanguageModel:
    """The model with fresh weights (random, or the directory's)."""
    if spec.gpt is not None:
        return build_model(spec.gpt, device=device)
    assert spec.hf is not None
    return build_hf_model(spec.hf, device=device)


def build_tokenizer(spec: ModelSpec) -> Tokenizer:
    """The tokenizer, checked to fit the model's embedding."""
    directory = spec.tokenizer or (spec.hf.path if spec.hf is not None else None)
    if directory is None:
        return ByteTokenizer()
    tokenizer = HFTokenizer.from_directory(Path(directory))
    if spec.hf is not None:
        tokenizer.check_fits(int(hf_config(spec.hf).vocab_size), model=spec.name)
    elif spec.gpt is not None:
        tokenizer.check_fits(spec.gpt.vocab_size, model=spec.name)
    return tokenizer


def state_template(spec: ModelSpec) -> dict[str, torch.Tensor]:
    """Empty CPU tensors shaped like the model's state dict, for DCP to load into, without
    initialising a model."""
    with torch.device("meta"):
        if spec.hf is not None:  # the shapes only: no weights read from a directory
            shapes = build_hf_model(spec.hf, device="meta", weights=False).state_dict()
        else:
            shapes = build_from_spec(spec, device="meta").state_dict()
    return {k: torch.empty(v.shape, dtype=v.dtype) for k, v in shapes.items()}
