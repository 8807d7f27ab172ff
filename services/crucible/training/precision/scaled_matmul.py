"""a @ b.T for two fp8-quantized operands, each (outer, K) and scaled along K: natively with
`torch._scaled_mm` on a Hopper GPU, or emulated by dequantizing and multiplying in float32.

Pairs the kernels take: tensor x tensor, row x row, and a 1x128-tile left operand with a
1x128-tile or 128x128-block right one (`SUPPORTED`). `torch._scaled_mm` wants the left
operand row-major and the right one column-major, and each granularity's scales in its own
layout: (M, 1) and (1, N) for rows; (M, K/128) column-major for left tiles; (K/128, N)
row-major for right tiles; (K/128, N/128) column-major for right blocks (torch's
`is_blockwise_*_scaling` checks). The result is bf16 either way: the emulation rounds its
float32 product to bf16 as the kernel's epilogue does, so an emulated run's numerics differ
from a native one's only in the order the kernel accumulates.

cuBLAS reads a 128x128-block operand's scales with their K extent rounded up to a multiple
of 4 blocks, and torch releases before PyTorch PR 166752 hand them over unpadded: where
K/128 is not a multiple of 4 (a width of 768 or 2304) the kernel reads the wrong scales and
answers wrong without an error (a 124M GPT trained erratically so). So such a pair
is multiplied with K padded by zero blocks (`pad_reduction`), which adds nothing to the
product on any torch version.
"""

import torch
from torch import Tensor
from torch.nn import functional as F

from crucible.training.precision.fp8_scaling import TILE, Granularity, ScaledFloat8

CUBLAS_BLOCK_SCALE_MULTIPLE = 4
"""A 128x128-block operand's scales come in groups of this many K blocks."""

SUPPORTED: frozenset[tuple[Granularity, Granularity]] = frozenset(
    {("tensor", "tensor"), ("row", "row"), ("tile", "tile"), ("tile", "block")}
)


def scaled_matmul(a: ScaledFloat8, b: ScaledFloat8, *, native: bool) -> Tensor:
    """bf16 (M, N) = a (M, K) @ b (N, K).T."""
    pair = (a.granularity, b.granularity)
    if pair not in SUPPORTED:
        raise ValueError(f"no scaled GEMM multiplies a {pair[0]} operand by a {pair[1]} one")
    if not native:
        with torch.autocast(a.data.device.type, enabled=False):
            return (a.dequantize() @ b.dequantize().t()).to(torch.bfloat16)
    if b.granularity == "block":
        a, b = pad_reduction(a), pad_reduction(b)
    return torch._scaled_mm(
        a.data,
        b.data.t(),
        scale_a=_left_scales(a),
        scale_b=_right_scales(b),
        out_dtype=torch.bfloat16,
    )


def _left_scales(a: ScaledFloat8) -> Tensor:
    if a.granularity == "tile":
        return a.scale_inv.t().contiguous().t()
    return a.scale_inv


def _right_scales(b: ScaledFloat8) -> Tensor:
    inverse = b.scale_inv
    if b.granularity == "row":
        return inverse.reshape(1, -1)
    if b.granularity == "tile":
        return inverse.t().contiguous()
    if b.granularity == "block":
        return inverse.contiguous().t()
    return inverse


def pad_reduction(operand: ScaledFloat8) -> ScaledFloat8:
    """The tile- or block-scaled operand with K padded by zeros (and scales of 1) to a
    multiple of CUBLAS_BLOCK_SCALE_MULTIPLE blocks; itself if K is one already."""
    blocks = operand.data.shape[1] // TILE
    missing = -blocks % CUBLAS_BLOCK_SCALE_MULTIPLE
    if not missing:
        return operand
    # float8 has no padding kernel; its +0 is the byte 0.
    data = F.pad(operand.data.view(torch.uint8), (0, missing * TILE)).view(operand.data.dtype)
    scale = F.pad(operand.scale, (0, missing), value=1.0)
    return ScaledFloat8(data, scale, operand.granularity, operand.amax)
