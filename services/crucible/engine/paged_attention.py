"""Decode attention straight from the paged KV cache: one query per row, on the GPU.

The prompt path gathers a row's blocks into one contiguous run of keys and hands it to
SDPA with a mask. For a decode step that gather is most of the step's memory traffic: every
row's whole cache is read, written out again and read once more, and the mask pads every
row to the longest. This kernel reads each row's keys and values once, through its block
table, and stops at the row's own length; one program per (row, KV head) holds the online
softmax of that head's queries (several under grouped-query attention) in registers.

The cache layout is the runners' (blocks + 1, block_size, kv_heads, head_dim) per layer.
Triton only is imported when a CUDA tensor comes in, so CPU-only installs never need it;
the tests run the same kernel through Triton's interpreter on the CPU.
"""

from functools import cache
from typing import Any

from torch import Tensor

KEYS_PER_TILE = 64
"""Keys one loop iteration loads per row: several blocks at once, so that each program has
enough loads in flight to cover memory latency."""


def decode_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_tables: Tensor,
    lengths: Tensor,
    *,
    scale: float,
    window: int | None = None,
    keys_per_tile: int = KEYS_PER_TILE,
    num_warps: int = 1,
) -> Tensor:
    """(rows, heads, head_dim) attention of each row's one query over its first `lengths`
    keys (or its last `window` of them).

    q: (rows, heads, head_dim); k_cache, v_cache: one layer's (blocks, block_size, kv_heads,
    head_dim); block_tables: (rows, >= blocks per row) int; lengths: (rows,) int, >= 1.
    """
    rows, heads, head_dim = q.shape
    _, block_size, kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim or heads % kv_heads:
        raise ValueError(
            f"queries {tuple(q.shape)} do not fit a cache of {kv_heads} heads of {cache_head_dim}"
        )
    if keys_per_tile % block_size:
        raise ValueError(f"block_size {block_size} must divide {keys_per_tile}")
    group = heads // kv_heads
    q = q.contiguous()
    out = q.new_empty(q.shape)
    kernel = _kernel()
    kernel[(rows, kv_heads)](
        q,
        k_cache,
        v_cache,
        out,
        block_tables,
        lengths,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        scale,
        window or 0,
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=_next_power_of_two(head_dim),
        GROUP=group,
        GROUP_PAD=_next_power_of_two(group),
        TILE=keys_per_tile,
        num_warps=num_warps,
    )
    return out


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


@cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def paged_decode_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        out_ptr,
        tables_ptr,
        lengths_ptr,
        q_row_stride,
        q_head_stride,
        cache_block_stride,
        cache_position_stride,
        cache_head_stride,
        table_row_stride,
        scale,
        window,
        BLOCK_SIZE: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_PAD: tl.constexpr,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        TILE: tl.constexpr,
    ):
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        length = tl.load(lengths_ptr + row).to(tl.int32)
        first = tl.where(window > 0, tl.maximum(length - window, 0), 0)

        dims = tl.arange(0, HEAD_DIM_PAD)
        members = tl.arange(0, GROUP_PAD)
        q_heads = kv_head * GROUP + members
        q_mask = (members[:, None] < GROUP) & (dims[None, :] < HEAD_DIM)
        q_offsets = row * q_row_stride + q_heads[:, None] * q_head_stride + dims[None, :]
        # The scale is folded into the queries once, and exp2 replaces exp.
        q = tl.load(q_ptr + q_offsets, mask=q_mask, other=0.0).to(tl.float32)
        q = q * (scale * 1.4426950408889634)

        running_max = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        running_sum = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
        offsets_in_tile = tl.arange(0, TILE)
        head_offset = kv_head * cache_head_stride
        for start in range(first - first % TILE, length, TILE):
            positions = start + offsets_in_tile
            visible = (positions < length) & (positions >= first)
            blocks = tl.load(
                tables_ptr + row * table_row_stride + positions // BLOCK_SIZE,
                mask=visible,
                other=0,
            ).to(tl.int64)
            key_offsets = (
                blocks * cache_block_stride
                + (positions % BLOCK_SIZE) * cache_position_stride
                + head_offset
            )
            kv_offsets = key_offsets[:, None] + dims[None, :]
            kv_mask = visible[:, None] & (dims[None, :] < HEAD_DIM)
            k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
            v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)

            scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # (GROUP_PAD, TILE)
            scores = tl.where(visible[None, :], scores, float("-inf"))
            tile_max = tl.maximum(running_max, tl.max(scores, axis=1))
            correction = tl.exp2(running_max - tile_max)
            weights = tl.exp2(scores - tile_max[:, None])
            running_sum = running_sum * correction + tl.sum(weights, axis=1)
            acc = acc * correction[:, None] + tl.sum(weights[:, :, None] * v[None, :, :], axis=1)
            running_max = tile_max

        out = acc / running_sum[:, None]
        tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=q_mask)

    return paged_decode_kernel
