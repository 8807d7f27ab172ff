"""The built-in GPT's forward over a paged KV cache.

The cache is one tensor per keys and values, (layers, blocks + 1, block_size, heads,
head_dim); the extra block is scratch, where padding tokens write so that every row of a
batch has the same shape. A row's keys are gathered through its block table and attended
with a mask of what its queries may see: its own earlier positions, nothing past its
length. The same code runs for prompts (many queries per row) and, on the CPU, decode
steps (one); on the GPU a decode step reads the blocks in place (`paged_attention.py`).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from crucible.engine.paged_attention import decode_attention
from crucible.engine.runner import ForwardBatch
from crucible.models.gpt import GPT, Block


class PagedGPT:
    """The built-in GPT and its paged cache: what the engine runs for it."""

    def __init__(self, model: GPT, *, num_blocks: int, block_size: int) -> None:
        config = model.config
        self.model = model
        self.max_seq_len = config.max_seq_len
        self.vocab_size = config.vocab_size
        self.device = model.wte.weight.device
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.graph_safe = True
        self.decode_in_place = self.device.type == "cuda"
        """Decode steps attend through `paged_attention.py`'s kernel (Triton: on CUDA, or
        on the CPU under Triton's interpreter in tests) rather than gathering the blocks."""
        self.n_head = config.n_head
        self.head_dim = config.d_model // config.n_head
        weight = model.wte.weight
        shape = (config.n_layer, num_blocks + 1, block_size, self.n_head, self.head_dim)
        self.k = torch.zeros(shape, device=weight.device, dtype=weight.dtype)
        self.v = torch.zeros_like(self.k)

    @property
    def scratch_block(self) -> int:
        return self.num_blocks

    @staticmethod
    def bytes_per_block(model: GPT, block_size: int) -> int:
        config = model.config
        return 2 * config.n_layer * block_size * config.d_model * model.wte.weight.itemsize

    @torch.no_grad()
    def forward(self, batch: ForwardBatch) -> Tensor:
        """(rows, vocab) logits of each row's last real token, its keys and values written."""
        return _forward(self.model, self, batch)


def _forward(model: GPT, kv: PagedGPT, batch: ForwardBatch) -> Tensor:
    x = model.wte(batch.tokens) + model.wpe(batch.positions)
    decode_in_place = batch.tokens.size(1) == 1 and kv.decode_in_place
    mask = None
    if not decode_in_place:
        key_index = torch.arange(batch.block_tables.size(1) * kv.block_size, device=x.device)
        visible = (key_index[None, None, :] <= batch.positions[:, :, None]) & (
            key_index[None, None, :] < batch.lengths[:, None, None]
        )
        mask = visible[:, None]
    for block in model.blocks:
        x = _paged_block(block, x, kv, batch, mask)  # type: ignore[arg-type]
    rows = torch.arange(x.size(0), device=x.device)
    last = x[:, 0] if decode_in_place else x[rows, batch.last]
    return model.lm_head(model.ln_f(last))  # type: ignore[no-any-return]


def _paged_block(
    block: Block, x: Tensor, kv: PagedGPT, batch: ForwardBatch, mask: Tensor | None
) -> Tensor:
    """One layer; `mask` None means a decode step attending in place, in the cache."""
    attn = block.attn
    rows, width, d_model = x.shape
    heads, head_dim = kv.n_head, kv.head_dim
    q, k, v = (
        t.view(rows, width, heads, head_dim) for t in attn.qkv(block.ln_attn(x)).split(d_model, 2)
    )
    k_layer, v_layer = kv.k[attn.layer], kv.v[attn.layer]
    slots = batch.slots.reshape(-1)
    k_layer.view(-1, heads, head_dim).index_copy_(0, slots, k.reshape(-1, heads, head_dim))
    v_layer.view(-1, heads, head_dim).index_copy_(0, slots, v.reshape(-1, heads, head_dim))
    scale = 1.0 / math.sqrt(head_dim)
    if mask is None:
        y = decode_attention(
            q[:, 0], k_layer, v_layer, batch.block_tables, batch.lengths, scale=scale
        )[:, None]
    else:
        # (rows, blocks, block_size, heads, head_dim) -> (rows, heads, keys, head_dim)
        keys = k_layer[batch.block_tables].flatten(1, 2).transpose(1, 2)
        values = v_layer[batch.block_tables].flatten(1, 2).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2).to(keys.dtype), keys, values, attn_mask=mask, scale=scale
        ).transpose(1, 2)
    x = x + attn.proj(y.to(x.dtype).reshape(rows, width, d_model))
    return x + block.mlp(block.ln_mlp(x))  # type: ignore[no-any-return]
