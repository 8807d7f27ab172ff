"""A small GPT: pre-norm blocks, causal SDPA, GELU MLP, tied embeddings, explicit KV cache.

Three attention paths: training uses `is_causal=True` (the fused kernels' fast path);
packed rows (several documents end to end) pass a mask that keeps each document to itself;
generation passes an explicit mask so that left-padded prompts of different lengths can
share a batch, and so that the cached and uncached paths compute the same thing.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from crucible.config.workload import ModelConfig


class KVCache:
    """Keys and values of every layer for the positions generated so far."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        batch_size: int,
        max_len: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        head_dim = config.d_model // config.n_head
        shape = (config.n_layer, batch_size, config.n_head, max_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len
        self.length = 0
        """Positions already written; advanced by the model after all layers ran."""

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        end = self.length + k.size(2)
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} were requested")
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: Tensor, attn_mask: Tensor | None, cache: KVCache | None) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = (
            t.view(batch, seq, self.n_head, width // self.n_head).transpose(1, 2)
            for t in self.qkv(x).split(width, dim=2)
        )
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        if attn_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))  # type: ignore[no-any-return]


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, config.mlp_ratio * config.d_model)
        self.down = nn.Linear(config.mlp_ratio * config.d_model, config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, attn_mask: Tensor | None, cache: KVCache | None) -> Tensor:
        x = x + self.attn(self.ln_attn(x), attn_mask, cache)
        return x + self.mlp(self.ln_mlp(x))  # type: ignore[no-any-return]


class GPT(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.activation_checkpointing = False
        """Recompute each block's activations in the backward pass instead of keeping them:
        memory for one block's worth of activations at the cost of a second forward."""
        self.apply(_init_weights)
        # GPT-2: scale the residual projections so the stream's variance does not grow
        # with depth.
        for name, param in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def forward(
        self,
        tokens: Tensor,
        *,
        key_valid: Tensor | None = None,
        cache: KVCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Logits for `tokens` (batch, seq).

        key_valid: (batch, cached + seq) bool, False at left padding. Positions count
        valid tokens only, so a padded prompt sees the same positions as an unpadded one.
        cache: when given, `tokens` continue the cached positions and are appended to it.
        positions: (batch, seq) for packed rows, each token's position in its document; a
        token attends only to earlier tokens of its own document (not with a cache).
        """
        batch, seq = tokens.shape
        start = cache.length if cache is not None else 0
        total = start + seq
        if total > self.config.max_seq_len:
            raise ValueError(
                f"sequence of {total} tokens exceeds max_seq_len={self.config.max_seq_len}"
            )
        attn_mask: Tensor | None = None
        if positions is not None:
            if cache is not None or key_valid is not None:
                raise ValueError("packed positions are for training: no cache, no key_valid")
            attn_mask = document_mask(positions)
        elif key_valid is None and cache is None:
            positions = torch.arange(seq, device=tokens.device).unsqueeze(0)
        else:
            if key_valid is None:
                key_valid = torch.ones(batch, total, dtype=torch.bool, device=tokens.device)
            positions = valid_positions(key_valid)[:, start:total]
            attn_mask = _generation_mask(key_valid, start, seq)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            if self.activation_checkpointing and self.training and cache is None:
                x = checkpoint(block, x, attn_mask, None, use_reentrant=False)
            else:
                x = block(x, attn_mask, cache)
        if cache is not None:
            cache.length = total
        return self.lm_head(self.ln_f(x))  # type: ignore[no-any-return]

    @property
    def max_seq_len(self) -> int:
        """Longest sequence the model takes (as `HFCausalLM.max_seq_len`)."""
        return self.config.max_seq_len

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        weight = self.wte.weight
        return KVCache(
            self.config,
            batch_size=batch_size,
            max_len=max_len,
            device=weight.device,
            dtype=weight.dtype,
        )


def valid_positions(key_valid: Tensor) -> Tensor:
    """(batch, total) position of each token counting valid tokens only, so a left-padded
    prompt sees the positions an unpadded one would (padding sits at 0)."""
    return (key_valid.long().cumsum(1) - 1).clamp(min=0)


def document_ids(positions: Tensor) -> Tensor:
    """(batch, seq) which document of its row each token is in: a new one begins wherever
    the position does not go on from the previous token's (as transformers reads packed
    `position_ids`)."""
    before = torch.cat([positions[:, :1] - 1, positions[:, :-1]], dim=1)
    return (positions - before != 1).cumsum(1)


def document_mask(positions: Tensor) -> Tensor:
    """(batch, 1, seq, seq) bool: causal, and only within the query's own document."""
    documents = document_ids(positions)
    seq = positions.size(1)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
    same = documents[:, :, None] == documents[:, None, :]
    return (same & causal)[:, None]


def _generation_mask(key_valid: Tensor, start: int, seq: int) -> Tensor:
    """(batch, 1, seq, total) bool: causal, skipping padded keys.

    Every query may always see itself, so a padding row never has an empty softmax (NaN);
    its output is discarded anyway.
    """
    total = key_valid.size(1)
    device = key_valid.device
    query_pos = torch.arange(start, start + seq, device=device).unsqueeze(1)
    key_pos = torch.arange(total, device=device).unsqueeze(0)
    causal = key_pos <= query_pos
    itself = key_pos == query_pos
    return (causal & key_valid[:, None, None, :]) | itself


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def build_model(config: ModelConfig, *, device: torch.device | str = "cpu") -> GPT:
    return GPT(config).to(device)


def num_params(model: GPT, *, exclude_embeddings: bool = False) -> int:
    """Parameters counted once (the tied head is the token embedding)."""
    total = sum(p.numel() for p in model.parameters())
    if exclude_embeddings:
        total -= model.wte.weight.numel() + model.wpe.weight.numel()
    return total


def flops_per_token(config: ModelConfig, seq_len: int) -> int:
    """Training FLOPs (forward + backward) per token, for MFU.

    6 per non-embedding parameter (PaLM appendix B) plus attention scores and values,
    12 * layers * width * sequence; the tied head is counted as a matmul.
    """
    d = config.d_model
    per_layer = 4 * d * d + 2 * config.mlp_ratio * d * d
    matmul_params = config.n_layer * per_layer + config.vocab_size * d
    return 6 * matmul_params + 12 * config.n_layer * d * seq_len
