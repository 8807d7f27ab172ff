"""NVFP4: FP4 E2M1 elements (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6) in blocks of 16 along the
last dimension, one FP8 E4M3 scale per block and one float32 scale per tensor.

The scale arithmetic follows Transformer Engine's NVFP4 reference quantizer
(transformer_engine/pytorch/custom_recipes/quantization_nvfp4.py, written to match its
kernels), step by step in float32, because the order of the roundings decides the bits:

    tensor_encode = min(448 * 6 / tensor_amax, FLT_MAX), 1 if that is 0
    tensor_decode = 1 / tensor_encode                       # the per-tensor scale
    block_decode  = e4m3(min(block_amax * (tensor_encode * (1/6)), 448))   # round to nearest
    block_encode  = min(1 / (block_decode * tensor_decode), FLT_MAX)
    element       = e2m1(clamp(x * block_encode, -6, 6))

so a block's amax lands on 6 and the block scales span E4M3's range for the tensor's amax:
the block scale is block_amax / 6 divided by the tensor scale amax / (6 * 448), rounded to
E4M3. Elements round to nearest, ties to even, and saturate at 6 (a block's amax can land a
hair above 6 after the scale's rounding; far above it only where the block's scale is an
E4M3 subnormal, whose steps are coarse). A block whose scale rounds to zero (its amax is
below about 2**-10 / 448 of the tensor's) dequantizes to zero, whatever its elements.

Options:
- `stochastic`: round each element up or down to its two neighbours with probability
  proportional to the distance, from the given uniform draws (the emulated layers take them
  from counter_rng.py) or those of `generator`, so the rounding is unbiased (NVIDIA's recipe
  uses it for gradients only).
- `two_d_blocks`: one scale per 16x16 tile of a 2-D tensor instead of per 1x16 row segment, so
  the weight quantizes to the same values whether a GEMM reads it by rows or by columns.

Non-finite input poisons the whole tensor: tensor scale NaN, block scales E4M3 NaN, elements
0, so everything dequantizes to NaN. Signs follow IEEE: a negative value that rounds to zero
keeps its sign bit (TE's reference maps an exact -0.0 to +0; the values are equal). The last
dimension must be a multiple of 16 (and, with 2-D blocks, the first too); others are refused.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

BLOCK_SIZE = 16
E2M1_MAX = 6.0
E2M1_SATURATION = 7.0
"""The smallest scaled magnitude that E2M1's max clips: the midpoint between 6 and the 8 its
grid would have next, a tie going to 8 (the even code). A block's amax lands up to 6 * 17/16
after its E4M3 scale's rounding, which rounds to 6 anyway and is not counted."""
E4M3_MAX = 448.0
E4M3_NAN_BITS = 0x7F
SIGN_BIT = 0x8
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""The value of each 3-bit magnitude code; bit 3 of a code is the sign."""


@dataclass(frozen=True)
class NVFP4Tensor:
    """A tensor in NVFP4, its codes unpacked one to a byte (packing is the kernels' business)."""

    codes: Tensor
    """uint8 0..15, the input's shape: bit 3 the sign, bits 0-2 the index into E2M1_MAGNITUDES."""
    block_scales: Tensor
    """float8_e4m3fn, the input's shape with the last dimension divided by 16 (with 2-D blocks,
    each tile's scale repeated for its 16 rows)."""
    tensor_scale: Tensor
    """float32 scalar: the decode scale, tensor_amax / (6 * 448) up to rounding."""
    saturated: Tensor
    """bool, the input's shape: elements the max of 6 clipped, which round-to-nearest on the
    grid continued would have taken past it (`E2M1_SATURATION`)."""

    def dequantize(self) -> Tensor:
        """float32 values: element * block scale (exact) * tensor scale (one rounding)."""
        return self.block_values() * self.tensor_scale

    def block_values(self) -> Tensor:
        """float32 element * block scale, without the tensor scale: what a block-scaled kernel
        multiplies before applying the tensor scales to its output. Exact, and exact in bf16
        too: at most 6 significant bits (E2M1's 2 and E4M3's 4), magnitudes 2**-10 to 2688."""
        table = torch.tensor(E2M1_MAGNITUDES, device=self.codes.device)
        magnitude = table[(self.codes & 0x7).long()]
        values = torch.where((self.codes & SIGN_BIT) != 0, -magnitude, magnitude)
        return values * _per_element(self.block_scales.float())

    def largest_magnitude(self) -> Tensor:
        """Per element, the largest magnitude its block can hold: 6 times the block's scale."""
        return (E2M1_MAX * _per_element(self.block_scales.float())) * self.tensor_scale


def quantize_nvfp4(
    x: Tensor,
    *,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
    uniform: Tensor | None = None,
    two_d_blocks: bool = False,
) -> NVFP4Tensor:
    """x in NVFP4 along its last dimension.

    With `stochastic`, the uniform draws are `uniform` (x's shape, in [0, 1)) where given, else
    exactly `torch.rand(x.shape, generator=generator, device=x.device)`, one per element in
    row-major order, so a caller holding a generator in the same state can reproduce them.
    """
    _check_shape(x, two_d_blocks)
    x = x.float()
    tensor_amax = x.abs().amax()
    finite = torch.isfinite(tensor_amax)
    one = torch.ones((), device=x.device)
    tensor_encode = torch.div(E4M3_MAX * E2M1_MAX * one, tensor_amax).clamp(max=FLOAT32_MAX)
    tensor_encode = torch.where(tensor_encode == 0, one, tensor_encode)
    tensor_decode = torch.div(one, tensor_encode)
    # TE folds 1/6 into the tensor factor (in float32) to match its kernel.
    block_factor = tensor_encode * torch.div(one, E2M1_MAX * one)

    blocks = x.reshape(*x.shape[:-1], -1, BLOCK_SIZE)
    block_amax = _tile_amax(x) if two_d_blocks else blocks.abs().amax(dim=-1)
    block_decode = (block_amax * block_factor).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    block_encode = torch.div(one, block_decode.float() * tensor_decode).clamp(max=FLOAT32_MAX)
    scaled = (blocks * block_encode.unsqueeze(-1)).reshape(x.shape)
    # A block whose scale rounded to zero is flushed, not saturated.
    scale_nonzero = _per_element(block_decode.float() > 0)
    saturated = (scaled.abs() >= E2M1_SATURATION) & scale_nonzero & finite
    clamped = scaled.clamp(-E2M1_MAX, E2M1_MAX)
    if stochastic:
        if uniform is None:
            uniform = torch.rand(x.shape, generator=generator, device=x.device)
        codes = _e2m1_codes_stochastic(clamped, uniform)
    else:
        codes = _e2m1_codes_nearest_even(clamped)

    nan_scale = torch.tensor(E4M3_NAN_BITS, dtype=torch.uint8, device=x.device)
    block_scales = torch.where(finite, block_decode.view(torch.uint8), nan_scale)
    return NVFP4Tensor(
        codes=torch.where(finite, codes, 0).to(torch.uint8),
        block_scales=block_scales.view(torch.float8_e4m3fn),
        tensor_scale=torch.where(finite, tensor_decode, torch.nan),
        saturated=saturated,
    )


def fake_quantize_nvfp4(
    x: Tensor,
    *,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
    uniform: Tensor | None = None,
    two_d_blocks: bool = False,
) -> Tensor:
    """x rounded through NVFP4 and back to float32."""
    return quantize_nvfp4(
        x, stochastic=stochastic, generator=generator, uniform=uniform, two_d_blocks=two_d_blocks
    ).dequantize()


def _e2m1_codes_nearest_even(scaled: Tensor) -> Tensor:
    """Codes of values in [-6, 6], rounded to nearest with ties to the even code.

    Within each binade the grid is uniform (steps 0.5 below 2, 1 up to 4, 2 up to 6), so
    rounding value / step half-to-even lands on the even code at every tie, including the
    binade edges (1.75 -> 2, 3.5 -> 4, 5 -> 4).
    """
    magnitude = scaled.abs()
    step = _grid_step(magnitude)
    return _codes(torch.round(magnitude / step) * step, scaled)


def _e2m1_codes_stochastic(scaled: Tensor, uniform: Tensor) -> Tensor:
    """Codes of values in [-6, 6], rounded up with probability (|v| - lower) / (upper - lower).

    Every quantity is exact in float32: the step is a power of two and the distance to the
    lower neighbour is exact (Sterbenz), so the probability is exactly that fraction.
    """
    magnitude = scaled.abs()
    step = _grid_step(magnitude)
    steps = magnitude / step
    lower = torch.floor(steps)
    rounded = (lower + (uniform < steps - lower).float()) * step
    return _codes(rounded, scaled)


def _grid_step(magnitude: Tensor) -> Tensor:
    return torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))


def _codes(grid_value: Tensor, signed: Tensor) -> Tensor:
    """The code of a magnitude on the E2M1 grid, with the sign bit of `signed`."""
    magnitude_code = torch.where(
        grid_value < 2,
        grid_value * 2,
        torch.where(grid_value < 4, grid_value + 2, grid_value / 2 + 4),
    )
    sign = torch.signbit(signed).to(torch.uint8) * SIGN_BIT
    return magnitude_code.to(torch.uint8) | sign


def _tile_amax(x: Tensor) -> Tensor:
    """amax of each 16x16 tile of a 2-D tensor, repeated for the tile's 16 rows."""
    rows, cols = x.shape
    tiles = x.reshape(rows // BLOCK_SIZE, BLOCK_SIZE, cols // BLOCK_SIZE, BLOCK_SIZE)
    amax = tiles.abs().amax(dim=(1, 3))
    return amax.repeat_interleave(BLOCK_SIZE, dim=0)


def _per_element(block_values: Tensor) -> Tensor:
    return block_values.repeat_interleave(BLOCK_SIZE, dim=-1)


def _check_shape(x: Tensor, two_d_blocks: bool) -> None:
    if two_d_blocks and (x.dim() != 2 or x.shape[0] % BLOCK_SIZE or x.shape[1] % BLOCK_SIZE):
        raise ValueError(
            f"NVFP4 with 2-D blocks scales {BLOCK_SIZE}x{BLOCK_SIZE} tiles of a matrix; got shape "
            f"{tuple(x.shape)}: both dimensions must be multiples of {BLOCK_SIZE}"
        )
    if x.dim() == 0 or x.shape[-1] % BLOCK_SIZE:
        raise ValueError(
            f"NVFP4 scales blocks of {BLOCK_SIZE} along the last dimension; got shape "
            f"{tuple(x.shape)}: use a last dimension that is a multiple of {BLOCK_SIZE}"
        )
