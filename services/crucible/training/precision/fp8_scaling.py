"""FP8 E4M3 quantization at four scaling granularities, for GEMM operands laid out as
(outer, K), K being the dimension the GEMM reduces over.

- "tensor": one scale for the whole tensor;
- "row": one scale per row, i.e. per output row or column of the GEMM (torchao's rowwise);
- "tile": one scale per 1x128 segment of a row (DeepSeek-V3's activations and gradients);
- "block": one scale per 128x128 block (DeepSeek-V3's weights).

Every scale is dynamic, fp8_max / amax of its group in float32 and not rounded to a power of
two, so no value saturates but by the rounding of its own product; the elements are x * scale
rounded to nearest even. A group of zeros gets amax AMAX_FLOOR: a finite scale, zero codes.
These are the layouts `torch._scaled_mm` multiplies natively on Hopper (scaled_matmul.py
hands them over); reference.py's scalar encoder re-derives the same bits in the tests.
"""

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Granularity = Literal["tensor", "row", "tile", "block"]
TILE = 128
"""The 1x128 tile and 128x128 block edge (DeepSeek-V3, section 3.3.2)."""
E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)
AMAX_FLOOR = 1e-12


@dataclass(frozen=True)
class ScaledFloat8:
    """An (outer, K) tensor in E4M3 and the float32 scales that quantized it: shape () for
    "tensor", (outer, 1) for "row", (outer, K/128) for "tile", (outer/128, K/128) for
    "block"."""

    data: Tensor
    scale: Tensor
    granularity: Granularity
    amax: Tensor
    """float32 (): the largest magnitude of the tensor quantized (its groups' largest amax)."""

    @property
    def scale_inv(self) -> Tensor:
        """The factors that turn codes back into values: what a scaled GEMM multiplies by."""
        return self.scale.reciprocal()

    def transpose(self) -> "ScaledFloat8":
        """The transposed operand, for a scaling whose groups a transpose maps onto groups
        ("tensor", "block"): the same codes and scales as quantizing the transpose, without
        reading the high-precision values again."""
        if self.granularity not in ("tensor", "block"):
            raise ValueError(f"a {self.granularity}-scaled operand changes groups when transposed")
        scale = self.scale.t().contiguous() if self.granularity == "block" else self.scale
        return ScaledFloat8(self.data.t().contiguous(), scale, self.granularity, self.amax)

    def dequantize(self) -> Tensor:
        """The float32 values the codes stand for, as a scaled GEMM reads them."""
        return self.data.float() * _per_element(self.scale_inv, self.granularity, self.data.shape)


def quantize(x: Tensor, granularity: Granularity) -> ScaledFloat8:
    """x (outer, K) in E4M3, scaled per `granularity` group; the data comes out row-major."""
    if x.dim() != 2:
        raise ValueError(f"fp8 operands are (outer, K) matrices; got shape {tuple(x.shape)}")
    _check_divisible(x, granularity)
    groups = _grouped(x.float(), granularity)
    amax = groups.abs().amax(dim=_GROUP_DIMS[granularity], keepdim=True)
    # A true quotient: `E4M3_MAX / tensor` would be 448 * (1 / amax), rounded twice.
    scale = torch.full_like(amax, E4M3_MAX) / amax.clamp(min=AMAX_FLOOR)
    data = (groups * scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).reshape(x.shape).contiguous()
    return ScaledFloat8(data, _scale_matrix(scale, granularity), granularity, amax.max())


_GROUP_DIMS: dict[Granularity, tuple[int, ...]] = {
    "tensor": (0, 1),
    "row": (1,),
    "tile": (2,),
    "block": (1, 3),
}


def _grouped(values: Tensor, granularity: Granularity) -> Tensor:
    """A view of (outer, K) values with each scale group along its own dimensions, so that a
    group's scale broadcasts over it and no per-element copy of the scales is made."""
    outer, k = values.shape
    if granularity == "tile":
        return values.reshape(outer, k // TILE, TILE)
    if granularity == "block":
        return values.reshape(outer // TILE, TILE, k // TILE, TILE)
    return values


def _scale_matrix(scale: Tensor, granularity: Granularity) -> Tensor:
    """The kept-dimension scales as ScaledFloat8 holds them: (), (outer, 1), (outer, K/128)
    or (outer/128, K/128)."""
    if granularity == "tensor":
        return scale.reshape(())
    if granularity == "tile":
        return scale.squeeze(2)
    if granularity == "block":
        return scale.squeeze(3).squeeze(1)
    return scale


def _per_element(scale: Tensor, granularity: Granularity, shape: torch.Size) -> Tensor:
    """The scale broadcast to (or expanded over) every element of an operand of `shape`;
    only emulation and the tests dequantize, so the copy is theirs alone."""
    if granularity in ("tensor", "row"):
        return scale
    expanded = scale.repeat_interleave(TILE, dim=1)
    if granularity == "block":
        expanded = expanded.repeat_interleave(TILE, dim=0)
    return expanded[: shape[0], : shape[1]]


def _check_divisible(x: Tensor, granularity: Granularity) -> None:
    outer, k = x.shape
    if granularity == "tile" and k % TILE:
        raise ValueError(f"1x{TILE} tiles need K divisible by {TILE}; got shape {(outer, k)}")
    if granularity == "block" and (outer % TILE or k % TILE):
        raise ValueError(
            f"{TILE}x{TILE} blocks need both dimensions divisible by {TILE}; got shape {(outer, k)}"
        )
