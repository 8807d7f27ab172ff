"""Hugging Face causal LMs behind the interface the workloads use for the built-in GPT.

A model comes from a Hugging Face model directory (config.json, safetensors weights and,
usually, tokenizer files) or is built from an architecture's config with random weights
(`model_type` as transformers names it: "llama", "qwen2", "gpt2", ...). Nothing is ever
downloaded: directories are read with `local_files_only`, and a model built from a config
has no weights to fetch.

`HFCausalLM` wraps the transformers model so the trainer, the generators and the evals call
it as they call `GPT`: `model(tokens, key_valid=..., cache=...)` returns logits, positions
count valid tokens only (left-padded prompts see the positions an unpadded prompt would),
`model(tokens, positions=...)` keeps the documents of a packed row apart,
`new_cache()` starts an empty KV cache, `blocks` are the decoder layers (FSDP's units and
what `compile_blocks` compiles), and `activation_checkpointing` switches transformers' own
gradient checkpointing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from crucible.config.model_source import WEIGHT_FILES, HFModelSource, ModelSourceError
from crucible.models.gpt import GPT, valid_positions


class HFCache:
    """A transformers KV cache and how many positions it holds."""

    def __init__(self) -> None:
        from transformers.cache_utils import DynamicCache

        self.inner = DynamicCache()
        self.length = 0


class HFCausalLM(nn.Module):
    """A transformers causal LM with the built-in GPT's calling convention."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        hf_config: Any = inner.config
        self.hf_config = hf_config
        self.max_seq_len: int = _max_positions(hf_config)
        self.vocab_size: int = int(hf_config.vocab_size)
        self._activation_checkpointing = False

    @property
    def blocks(self) -> nn.ModuleList:
        """The decoder layers: the one ModuleList with a module per hidden layer."""
        layers = int(getattr(self.hf_config, "num_hidden_layers", 0))
        for module in self.inner.modules():
            if isinstance(module, nn.ModuleList) and len(module) == layers:
                return module
        raise ModelSourceError(
            f"cannot find the {layers} decoder layers of {type(self.inner).__name__}"
        )

    @property
    def activation_checkpointing(self) -> bool:
        return self._activation_checkpointing

    @activation_checkpointing.setter
    def activation_checkpointing(self, enabled: bool) -> None:
        if enabled:
            self.inner.gradient_checkpointing_enable(  # type: ignore[operator]
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        elif self._activation_checkpointing:
            self.inner.gradient_checkpointing_disable()  # type: ignore[operator]
        self._activation_checkpointing = enabled

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(
        self,
        tokens: Tensor,
        *,
        key_valid: Tensor | None = None,
        cache: HFCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Logits for `tokens` (batch, seq), as `GPT.forward` defines them."""
        batch, seq = tokens.shape
        start = cache.length if cache is not None else 0
        total = start + seq
        if total > self.max_seq_len:
            raise ValueError(f"sequence of {total} tokens exceeds max_seq_len={self.max_seq_len}")
        if positions is not None:
            if cache is not None or key_valid is not None:
                raise ValueError("packed positions are for training: no cache, no key_valid")
            # Without an attention mask transformers reads restarting position_ids as packed
            # documents and masks attention across their boundaries (masking_utils).
            out = self.inner(input_ids=tokens, position_ids=positions, use_cache=False)
            return out.logits  # type: ignore[no-any-return]
        if key_valid is None and cache is None:
            return self.inner(input_ids=tokens, use_cache=False).logits  # type: ignore[no-any-return]
        if key_valid is None:
            key_valid = torch.ones(batch, total, dtype=torch.bool, device=tokens.device)
        positions = valid_positions(key_valid)[:, start:total]
        out = self.inner(
            input_ids=tokens,
            attention_mask=key_valid.long(),
            position_ids=positions,
            cache=cache.inner if cache is not None else None,
            use_cache=cache is not None,
        )
        if cache is not None:
            cache.length = total
        return out.logits  # type: ignore[no-any-return]

    def new_cache(self, batch_size: int, max_len: int) -> HFCache:
        """An empty cache; it grows as positions are added (`batch_size` and `max_len` are
        the GPT's static sizes, checked by `forward` against `max_seq_len` instead)."""
        del batch_size, max_len
        return HFCache()

    def save_pretrained(self, directory: Path) -> None:
        """The model as a Hugging Face directory: config.json and model.safetensors."""
        self.inner.save_pretrained(directory, safe_serialization=True)  # type: ignore[operator]


def quiet_transformers() -> None:
    """No progress bars in job logs (one line per shard loaded or written)."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def build_hf_model(
    source: HFModelSource, *, device: torch.device | str = "cpu", weights: bool = True
) -> HFCausalLM:
    """The model `source` names, in float32 on `device` (the trainer's autocast and FSDP's
    mixed precision choose the compute dtype, as for the GPT). weights=False: a directory's
    architecture with random weights (for shapes, or to load a checkpoint into)."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    config = hf_config(source)
    if source.path is not None and weights:
        inner = AutoModelForCausalLM.from_pretrained(
            source.path,
            config=config,
            local_files_only=True,
            use_safetensors=True,
            dtype=torch.float32,
            attn_implementation="sdpa",
        )
    else:
        inner = AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation="sdpa"
        )
    return HFCausalLM(inner).to(device)


def hf_config(source: HFModelSource) -> Any:
    """The transformers config of `source`, with its overrides; a clear error when the
    directory lacks config.json or weights, or the architecture is not a causal LM."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    overrides = dict(source.config)
    if source.path is not None:
        directory = Path(source.path)
        config_file = directory / "config.json"
        if not config_file.is_file():
            raise ModelSourceError(f"model directory {directory} has no config.json")
        if not any((directory / name).is_file() for name in WEIGHT_FILES):
            raise ModelSourceError(
                f"model directory {directory} has no safetensors weights "
                f"({' or '.join(WEIGHT_FILES)})"
            )
        try:
            model_type = json.loads(config_file.read_text()).get("model_type")
        except json.JSONDecodeError as exc:
            raise ModelSourceError(f"{config_file} is not JSON: {exc}") from None
        config = AutoConfig.from_pretrained(directory, local_files_only=True, **overrides)
    else:
        model_type = str(source.architecture)
        if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ModelSourceError(
                f"architecture {model_type!r} is not a transformers causal LM "
                "(e.g. llama, qwen2, gpt2, mistral, gemma)"
            )
        try:
            config = AutoConfig.for_model(model_type, **overrides)
        except (TypeError, ValueError) as exc:
            raise ModelSourceError(f"config of architecture {model_type!r}: {exc}") from None
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelSourceError(f"model_type {model_type!r} of {source.path} is not a causal LM")
    return config


def _max_positions(hf_config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(hf_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ModelSourceError(f"{type(hf_config).__name__} names no maximum sequence length")


LanguageModel = GPT | HFCausalLM
"""What the generators, evals and the trainer run: the built-in GPT or a Hugging Face model."""
