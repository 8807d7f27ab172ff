"""MXFP8 (OCP Microscaling Formats v1.0): 32 consecutive elements along the last dimension
share one E8M0 scale, a power of two 2**(bits - 127) (bits 0..254; 255 is NaN), and each
element is stored in FP8 E4M3 (or E5M2).

Choices the spec leaves open, and what this module does:

- Scale exponent. "floor" is the spec's reference algorithm: floor(log2(amax)) minus the
  element format's largest exponent (8 for E4M3, 15 for E5M2). It maps the block's amax into
  [2**emax, 2**(emax+1)), above the format's max of 1.75 * 2**emax, so up to an eighth of that
  range saturates. "ceil" is NVIDIA's: ceil(log2(amax / fp8_max)), the smallest power of two
  under which nothing saturates. Transformer Engine computes it so (`float_to_e8m0` rounds the
  exponent of amax / max_norm up, or `cvt.rp.satfinite.ue8m0x2.f32` on Blackwell; its MXFP8
  docs say so), and Mishra et al., "Recipes for Pre-training LLMs with MXFP8" (arXiv
  2506.08027) show the spec's rounding can make pre-training diverge where rounding up does
  not. Both are exact here: computed from the float32 exponent and significand of amax, not
  from a rounded quotient.
- Overflow. Elements are rounded to nearest, ties to even, and saturate at the format's
  largest finite value (448 or 57344). The spec leaves overflow to the implementation;
  saturating is what the hardware conversions (`cvt.rn.satfinite`) do, and with "floor"
  scaling the block maximum overflows routinely, where NaN or inf would poison training.
- Zero blocks get scale bits 0 (2**-127), as the spec's reference code and TE both do.
- A block holding any NaN or infinity gets scale bits 255 (NaN) and NaN elements, so the whole
  block dequantizes to NaN: a non-finite value is a bug upstream, to be seen, not saturated.
- The last dimension must be a multiple of 32; anything else is refused, not padded, because
  the tensor-core kernels this emulates need it too.
"""

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

BLOCK_SIZE = 32
ScaleRounding = Literal["floor", "ceil"]
Element = Literal["e4m3", "e5m2"]

ELEMENT_DTYPES: dict[Element, torch.dtype] = {
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
ELEMENT_EMAX: dict[Element, int] = {"e4m3": 8, "e5m2": 15}
"""The exponent of each element format's largest normal binade."""
ELEMENT_MAX: dict[Element, float] = {
    k: float(torch.finfo(v).max) for k, v in ELEMENT_DTYPES.items()
}
ELEMENT_SATURATION: dict[Element, float] = {
    "e4m3": float(torch.nextafter(torch.tensor(464.0), torch.tensor(float("inf")))),
    "e5m2": 61440.0,
}
"""The smallest scaled magnitude that the format's max clips: the midpoint between the max
and the next value its grid would have (480 and 65536), ties going to the even one (448's
code is even, 57344's odd). Below it a value rounds to the max anyway."""
ELEMENT_NAN_BITS = 0x7F
"""A positive NaN in both E4M3FN and E5M2."""
E8M0_BIAS = 127
E8M0_NAN_BITS = 255
_MIN_EXPONENT, _MAX_EXPONENT = -E8M0_BIAS, E8M0_BIAS


@dataclass(frozen=True)
class MXFP8Tensor:
    """A tensor in MXFP8: elements and one scale per 32 along the last dimension."""

    elements: Tensor
    """float8 e4m3fn or e5m2, the input's shape."""
    scale_bits: Tensor
    """uint8, the input's shape with the last dimension divided by 32: the E8M0 encodings."""
    saturated: Tensor
    """bool, the input's shape: elements the format's max clipped, which round-to-nearest on
    its grid continued would have taken past it (`ELEMENT_SATURATION`)."""

    def scales(self) -> Tensor:
        """float32 2**(bits - 127), NaN where the bits are 255."""
        exponent = self.scale_bits.to(torch.int32) - E8M0_BIAS
        value = _exact_pow2(exponent)
        return torch.where(self.scale_bits == E8M0_NAN_BITS, torch.nan, value)

    def dequantize(self) -> Tensor:
        """The float32 values the encoding stands for; exact, for every encoding."""
        return self.elements.float() * _per_element(self.scales())

    def largest_magnitude(self) -> Tensor:
        """Per element, the largest magnitude its block can hold: the format max times the scale."""
        fp8_max = float(torch.finfo(self.elements.dtype).max)
        return fp8_max * _per_element(self.scales())


def quantize_mxfp8(
    x: Tensor, *, element: Element = "e4m3", scale_rounding: ScaleRounding
) -> MXFP8Tensor:
    """x in MXFP8 along its last dimension, which must be a multiple of 32.

    `scale_rounding` has no default on purpose: "floor" is the OCP spec, "ceil" NVIDIA's
    training recipe, and the difference matters (see the module docstring).
    """
    _check_last_dim(x)
    x = x.float()
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK_SIZE)
    amax = blocks.abs().amax(dim=-1)
    finite = torch.isfinite(amax)
    exponent = _shared_exponent(amax, element, scale_rounding)
    # The exponent stays within [-127, 120], so 2**-exponent is a normal float32 and the
    # product is exact unless it falls below float32's normal range, where the fp8 rounding
    # flushes it to zero anyway.
    scaled = blocks * _exact_pow2(-exponent).unsqueeze(-1)
    fp8_max = ELEMENT_MAX[element]
    saturated = (scaled.abs() >= ELEMENT_SATURATION[element]) & finite.unsqueeze(-1)
    # torch's float8 casts round to nearest even but turn overflow into NaN (e4m3fn) or inf
    # (e5m2); clamping first makes them saturate, and a value just above the max rounds to
    # the max under round-to-nearest anyway.
    elements = scaled.clamp(-fp8_max, fp8_max).to(ELEMENT_DTYPES[element])
    nan_element = torch.tensor(ELEMENT_NAN_BITS, dtype=torch.uint8, device=x.device)
    element_bits = torch.where(finite.unsqueeze(-1), elements.view(torch.uint8), nan_element).view(
        ELEMENT_DTYPES[element]
    )
    scale_bits = torch.where(finite, exponent + E8M0_BIAS, E8M0_NAN_BITS).to(torch.uint8)
    return MXFP8Tensor(
        elements=element_bits.reshape(x.shape),
        scale_bits=scale_bits,
        saturated=saturated.reshape(x.shape),
    )


def fake_quantize_mxfp8(
    x: Tensor, *, element: Element = "e4m3", scale_rounding: ScaleRounding
) -> Tensor:
    """x rounded through MXFP8 and back to float32."""
    return quantize_mxfp8(x, element=element, scale_rounding=scale_rounding).dequantize()


def _shared_exponent(amax: Tensor, element: Element, rounding: ScaleRounding) -> Tensor:
    """int32 scale exponent per block, clamped to E8M0's range (arbitrary for non-finite amax)."""
    emax = ELEMENT_EMAX[element]
    significand, exponent = torch.frexp(amax)  # amax = significand * 2**exponent, in [0.5, 1)
    floor_log2 = exponent - 1
    shared = floor_log2 - emax
    if rounding == "ceil":
        # Both formats' max is 1.75 * 2**emax, so amax / max has amax's exponent minus emax
        # and rounds up to the next power exactly when amax's significand exceeds 1.75.
        max_significand = ELEMENT_MAX[element] / 2.0**emax
        shared = shared + (2 * significand > max_significand).to(torch.int32)
    elif rounding != "floor":
        raise ValueError(f"scale_rounding={rounding!r}: use 'floor' (OCP) or 'ceil' (NVIDIA)")
    # frexp(0) is (0, 0); the spec's reference algorithm floors a zero amax to the smallest
    # scale, which the clamp then reaches.
    shared = torch.where(amax == 0, _MIN_EXPONENT, shared)
    return shared.clamp(_MIN_EXPONENT, _MAX_EXPONENT)


def _exact_pow2(exponent: Tensor) -> Tensor:
    """float32 2**exponent for int32 exponents in [-149, 127], built from its bits.

    exp2 on floats need not be exact on every device; the bit pattern is. Below float32's
    normal range (2**-126) the power is split in two normal factors, so the product rounds
    once, to the exact subnormal.
    """
    high = exponent.clamp(min=-126)
    low = exponent - high  # 0 unless the power is subnormal
    return _normal_pow2(high) * _normal_pow2(low.clamp(min=-126))


def _normal_pow2(exponent: Tensor) -> Tensor:
    return ((exponent.to(torch.int32) + 127) << 23).view(torch.float32)


def _per_element(block_values: Tensor) -> Tensor:
    return block_values.repeat_interleave(BLOCK_SIZE, dim=-1)


def _check_last_dim(x: Tensor) -> None:
    if x.dim() == 0 or x.shape[-1] % BLOCK_SIZE:
        raise ValueError(
            f"MXFP8 scales blocks of {BLOCK_SIZE} along the last dimension; got shape "
            f"{tuple(x.shape)}: use a last dimension that is a multiple of {BLOCK_SIZE}"
        )
