"""A Hugging Face causal LM's forward over the engine's paged KV cache.

The transformers model runs as it is: its embeddings, its positions (RoPE or learned, from
each token's position in its sequence), its layers and its head. Only attention is the
engine's. For the duration of one forward the model's attention implementation is
`crucible_paged`, a function registered in transformers' `AttentionInterface`; it gets each
layer's queries, keys and values for the new tokens (after RoPE), writes the keys and values
into the cache at the batch's slots, gathers the row's blocks and attends with SDPA, as
`PagedGPT` does for the built-in GPT; a decode step on the GPU reads the blocks in place
(`paged_attention.py`).

The batch and the cache reach that function as a keyword argument of the model's forward
(`paged_kv`): transformers hands the forward's extra keyword arguments down to every
attention call, so no batch is kept in a global and two runners never see each other's.

The cache is one tensor per keys and values, (layers, blocks + 1, block_size, kv_heads,
head_dim) in the model's dtype; the extra block is scratch, where padding tokens write.
"""

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface, PreTrainedConfig

from crucible.engine.paged_attention import decode_attention
from crucible.engine.runner import ForwardBatch
from crucible.models.hf import HFCausalLM

PAGED_ATTENTION = "crucible_paged"
"""The name the paged attention function is registered under in transformers."""

_LAYER_TYPES = {"full_attention", "sliding_attention"}
"""The layer types whose keys a mask of positions describes (transformers' names)."""

_UNPAGED_KWARGS = ("softcap", "position_bias", "s_aux")
"""Attention features transformers passes to the attention function that this one does not
compute (logit soft-capping, additive position biases, attention sinks)."""


class PagedHF:
    """A Hugging Face causal LM and its paged cache: what the engine runs for it."""

    def __init__(self, model: HFCausalLM, *, num_blocks: int, block_size: int) -> None:
        config = model.hf_config
        _refuse_unpaged_attention(config)
        self.model = model
        self.inner: Any = model.inner
        self.max_seq_len = model.max_seq_len
        self.vocab_size = model.vocab_size
        weight = next(model.parameters())
        self.device = weight.device
        self.num_blocks = num_blocks
        self.block_size = block_size
        # transformers builds rotary tables and masks inside each forward, in ways that
        # differ by model and version; none has been checked under a capture.
        self.graph_safe = False
        layers, self.kv_heads, self.head_dim = _kv_shape(config)
        self.windows = _sliding_windows(config)
        """Each layer's sliding window as its config declares it; None attends to all."""

        shape = (layers, num_blocks + 1, block_size, self.kv_heads, self.head_dim)
        self.k = torch.zeros(shape, device=weight.device, dtype=weight.dtype)
        self.v = torch.zeros_like(self.k)
        _register()
        self._configs = _attention_configs(self.inner)
        # transformers 5 computes the head at the positions `logits_to_keep` names, so a
        # prompt's forward does not project every token onto the vocabulary.
        self._slices_logits = "logits_to_keep" in inspect.signature(self.inner.forward).parameters

    @property
    def scratch_block(self) -> int:
        return self.num_blocks

    @staticmethod
    def bytes_per_block(model: HFCausalLM, block_size: int) -> int:
        layers, kv_heads, head_dim = _kv_shape(model.hf_config)
        itemsize = next(model.parameters()).itemsize
        return 2 * layers * block_size * kv_heads * head_dim * itemsize

    @torch.no_grad()
    def forward(self, batch: ForwardBatch) -> Tensor:
        """(rows, vocab) logits of each row's last real token, its keys and values written."""
        extra: dict[str, Any] = {}
        if self._slices_logits:
            extra["logits_to_keep"] = batch.last[:, None]
        with _paged_attention(self._configs):
            out = self.inner(
                input_ids=batch.tokens,
                position_ids=batch.positions,
                use_cache=False,
                paged_kv=_PagedCall(self, batch),
                **extra,
            )
        logits: Tensor = out.logits
        if logits.size(1) != 1:  # a model that computed the head at every position
            rows = torch.arange(logits.size(0), device=logits.device)
            return logits[rows, batch.last]
        return logits[:, 0]


@dataclass
class _PagedCall:
    """What one forward's attention calls share: the runner's cache, the batch, its masks."""

    runner: PagedHF
    batch: ForwardBatch
    masks: dict[int | None, Tensor] = field(default_factory=dict)
    """(rows, 1, width, keys) what each query may see, by sliding window; built by the
    first layer that needs it, shared by the rest."""

    def mask(self, window: int | None) -> Tensor:
        mask = self.masks.get(window)
        if mask is None:
            batch = self.batch
            keys = batch.block_tables.size(1) * self.runner.block_size
            key_index = torch.arange(keys, device=batch.positions.device)[None, None, :]
            query = batch.positions[:, :, None]
            mask = (key_index <= query) & (key_index < batch.lengths[:, None, None])
            if window is not None:
                # transformers' sliding window: a query sees the `window` positions up to its own.
                mask &= key_index > query - window
            mask = self.masks[window] = mask[:, None]
        return mask


def paged_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    paged_kv: _PagedCall | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Attention of `query` (rows, heads, width, head_dim) over each row's cached keys, the
    new `key` and `value` (rows, kv_heads, width, head_dim) written first; returns
    (rows, width, heads, head_dim) as transformers' `sdpa_attention_forward` does."""
    del dropout  # the engine runs the model in eval mode
    architecture = type(module).__name__
    if paged_kv is None:
        raise RuntimeError(
            f"{architecture} ran with the engine's paged attention outside PagedHF.forward "
            "(from another thread while the engine ran?), or did not pass its forward's "
            "keyword arguments down to attention"
        )
    if attention_mask is not None:
        raise ValueError(
            f"{architecture} built its own attention mask of shape {tuple(attention_mask.shape)}; "
            "the engine's paged attention cannot apply it"
        )
    for name in _UNPAGED_KWARGS:
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{architecture} attends with {name}, which the engine does not compute"
            )
    runner, batch = paged_kv.runner, paged_kv.batch
    layer = getattr(module, "layer_idx", None)
    if not isinstance(layer, int):
        raise ValueError(f"{architecture} has no layer_idx, got {layer!r}: no cache layer to use")
    window = kwargs.get("sliding_window")
    if window != runner.windows[layer]:
        raise ValueError(
            f"{architecture} layer {layer} attends with sliding_window={window} but its config "
            f"declares {runner.windows[layer]}: the engine cannot tell which keys it may see"
        )
    rows, heads, width, head_dim = query.shape
    kv_heads = key.size(1)
    if (kv_heads, key.size(3)) != (runner.kv_heads, runner.head_dim):
        raise ValueError(
            f"{architecture} layer {layer} has {kv_heads} key heads of {key.size(3)} dims; the "
            f"cache was sized from the config for {runner.kv_heads} of {runner.head_dim}"
        )

    k_layer, v_layer = runner.k[layer], runner.v[layer]
    slots = batch.slots.reshape(-1)
    k_layer.view(-1, kv_heads, head_dim).index_copy_(
        0, slots, key.transpose(1, 2).reshape(-1, kv_heads, head_dim).to(k_layer.dtype)
    )
    v_layer.view(-1, kv_heads, head_dim).index_copy_(
        0, slots, value.transpose(1, 2).reshape(-1, kv_heads, head_dim).to(v_layer.dtype)
    )
    if width == 1 and query.is_cuda:
        out = decode_attention(
            query[:, :, 0],
            k_layer,
            v_layer,
            batch.block_tables,
            batch.lengths,
            scale=scaling if scaling is not None else head_dim**-0.5,
            window=window,
        )
        return out[:, None].to(query.dtype), None
    # (rows, blocks, block_size, kv_heads, head_dim) -> (rows, kv_heads, keys, head_dim)
    keys = k_layer[batch.block_tables].flatten(1, 2).transpose(1, 2)
    values = v_layer[batch.block_tables].flatten(1, 2).transpose(1, 2)
    mask = paged_kv.mask(window)
    q = query.to(keys.dtype)
    groups = heads // kv_heads
    if groups > 1 and width == 1:
        # One query per row: a key head's query heads become its queries, all seeing the same
        # keys, so the keys need no copy per query head (transformers' `pack_gqa`).
        q = q.reshape(rows, kv_heads, groups, head_dim)
    elif groups > 1:
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scaling)
    out = out.reshape(rows, heads, width, head_dim).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    """Make the paged attention function known to transformers (once, when a runner is
    built, rather than as a side effect of importing this module). It has no entry in
    transformers' mask functions on purpose: for an implementation without one,
    `create_causal_mask` returns None instead of building a 4D mask nobody would read."""
    interface = AttentionInterface()
    if interface.get(PAGED_ATTENTION) is not paged_attention_forward:
        AttentionInterface.register(PAGED_ATTENTION, paged_attention_forward)


@contextmanager
def _paged_attention(configs: list[Any]) -> Iterator[None]:
    """The model attends through the paged function inside the block, with its own
    implementation again after it, even when the forward raises.

    Switched per forward rather than once for the runner's life because the attention
    implementation lives on the model's config, shared by every module and by whoever else
    holds the model: the trainer and `rollout.generate` between engine steps need their own
    (with its causal and padding masks). A copy of the config would not do, as each
    attention module holds the original. The model must not run elsewhere while an engine
    step runs (the paged function refuses a call without its batch)."""
    originals = [config._attn_implementation for config in configs]
    # The attribute `set_attn_implementation` writes: calling it would check the name again
    # and walk every module, on every decode step.
    for config in configs:
        config._attn_implementation_internal = PAGED_ATTENTION
    try:
        yield
    finally:
        for config, original in zip(configs, originals, strict=True):
            config._attn_implementation_internal = original


def _attention_configs(inner: Any) -> list[Any]:
    """The configs the model's attention reads its implementation from, found by switching
    once with transformers' `set_attn_implementation` (which checks that the model attends
    through `AttentionInterface`) and seeing which changed. A model that does not is
    refused: transformers only warns and keeps its own attention, which would never fill
    the cache."""
    configs = {
        id(config): config
        for module in inner.modules()
        if isinstance(config := getattr(module, "config", None), PreTrainedConfig)
    }
    original = inner.config._attn_implementation
    inner.set_attn_implementation(PAGED_ATTENTION)
    try:
        switched = [c for c in configs.values() if c._attn_implementation == PAGED_ATTENTION]
    finally:
        inner.set_attn_implementation(original)
    if not any(config is inner.config for config in switched):
        raise ValueError(
            f"{type(inner).__name__} does not attend through transformers' AttentionInterface, "
            "so the engine cannot page its KV cache"
        )
    return switched


def _kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head_dim) from a transformers config."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return int(config.num_hidden_layers), kv_heads, head_dim


def _sliding_windows(config: Any) -> list[int | None]:
    """Each layer's sliding window: every layer's when the config names a window and no
    layer types (Mistral), the "sliding_attention" layers' otherwise (Qwen2, Gemma)."""
    layers = int(config.num_hidden_layers)
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int):
        return [None] * layers
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None:
        return [window] * layers
    return [window if kind == "sliding_attention" else None for kind in layer_types]


def _refuse_unpaged_attention(config: Any) -> None:
    """Refuse attention patterns a mask of positions and windows does not describe."""
    model_type = getattr(config, "model_type", type(config).__name__)
    unknown = sorted(set(getattr(config, "layer_types", None) or ()) - _LAYER_TYPES)
    if unknown:
        raise ValueError(
            f"{model_type} has layers of type {', '.join(unknown)}; the engine pages only "
            f"{' and '.join(sorted(_LAYER_TYPES))} layers"
        )
    chunk = getattr(config, "attention_chunk_size", None)
    if chunk is not None:
        raise ValueError(
            f"{model_type} attends in chunks (attention_chunk_size={chunk}), "
            "which the engine's paged attention does not"
        )
