"""Slow, scalar reference encoders for MXFP8 and NVFP4, written apart from the fast quantizers
so the tests can hold those to the bit.

Nothing here uses torch: every format is a table of all its codes, each decoded from the bit
layout, and a value is encoded by finding its neighbours in the table and, at a tie, taking the
even code. Scale exponents are found by search, not from a float's exponent field, and float32
arithmetic is Python's float64 rounded to float32 (exact for products of float32s; for
quotients float64 has more than twice float32's precision, so rounding twice is harmless).
Inputs are Python floats that are float32 values; outputs are codes as ints.
"""

import bisect
import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


@dataclass(frozen=True)
class FloatFormat:
    """A small float format, decoded code by code from its bit layout."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    infinities: bool
    """E5M2 keeps IEEE's inf and NaNs in its top exponent; E4M3FN keeps only S.1111.111 as NaN."""

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exponent_bits + self.mantissa_bits)

    def decode(self, code: int) -> float:
        sign = -1.0 if code & self.sign_bit else 1.0
        exponent = (code >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1)
        mantissa = code & ((1 << self.mantissa_bits) - 1)
        top = (1 << self.exponent_bits) - 1
        if self.infinities and exponent == top:
            return sign * math.inf if mantissa == 0 else math.nan
        all_ones = (1 << self.mantissa_bits) - 1
        if self.name == "e4m3" and exponent == top and mantissa == all_ones:
            return math.nan
        if exponent == 0:
            return sign * math.ldexp(mantissa, 1 - self.bias - self.mantissa_bits)
        significand = (1 << self.mantissa_bits) + mantissa
        return sign * math.ldexp(significand, exponent - self.bias - self.mantissa_bits)

    def finite_magnitudes(self) -> list[tuple[float, int]]:
        """(value, code) for every finite non-negative value, ascending; +0 once."""
        return _finite_magnitudes(self)

    @property
    def max(self) -> float:
        return self.finite_magnitudes()[-1][0]

    @property
    def nan_code(self) -> int:
        return next(c for c in range(self.sign_bit) if math.isnan(self.decode(c)))


@functools.cache
def _finite_magnitudes(fmt: FloatFormat) -> list[tuple[float, int]]:
    pairs = [(fmt.decode(code), code) for code in range(fmt.sign_bit)]
    return sorted((v, c) for v, c in pairs if math.isfinite(v))


E4M3 = FloatFormat("e4m3", exponent_bits=4, mantissa_bits=3, bias=7, infinities=False)
E5M2 = FloatFormat("e5m2", exponent_bits=5, mantissa_bits=2, bias=15, infinities=True)
E2M1 = FloatFormat("e2m1", exponent_bits=2, mantissa_bits=1, bias=1, infinities=False)
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}


def f32(value: float) -> float:
    """value rounded to the nearest float32 (ties to even), overflowing to infinity."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def encode(value: float, fmt: FloatFormat, uniform: float | None = None) -> int:
    """The code of a finite value: nearest, ties to the even code, saturating at the max; or,
    given a uniform draw in [0, 1), rounded up with probability equal to the distance from the
    lower neighbour over the gap."""
    table = fmt.finite_magnitudes()
    sign = fmt.sign_bit if math.copysign(1.0, value) < 0 else 0
    magnitude = abs(value)
    if magnitude >= table[-1][0]:
        return table[-1][1] | sign
    upper_index = bisect.bisect_right(table, (magnitude, math.inf))
    (low, low_code), (high, high_code) = table[upper_index - 1], table[upper_index]
    if uniform is not None:
        round_up = uniform < (magnitude - low) / (high - low)
        return (high_code if round_up else low_code) | sign
    below, above = magnitude - low, high - magnitude
    if below < above or (below == above and low_code % 2 == 0):
        return low_code | sign
    return high_code | sign


def e8m0_bits(amax: float, element: FloatFormat, rounding: str) -> int:
    """The MXFP8 shared-scale encoding for a block with this finite amax, by search.

    floor: the largest k with 2**k <= amax, less the element format's largest exponent.
    ceil: the smallest k with amax <= element max * 2**k.
    Either is clamped to E8M0's [-127, 127]; a zero amax takes the smallest scale.
    """
    emax = math.frexp(element.max)[1] - 1
    if amax == 0:
        exponent = -127
    elif rounding == "floor":
        k = -200
        while math.ldexp(1.0, k + 1) <= amax:
            k += 1
        exponent = k - emax
    else:
        k = -200
        while amax > math.ldexp(element.max, k):
            k += 1
        exponent = k
    return min(max(exponent, -127), 127) + 127


def mxfp8_block(
    block: Sequence[float], element: FloatFormat, rounding: str
) -> tuple[int, list[int]]:
    """(scale bits, element codes) for one block of 32."""
    if not all(math.isfinite(v) for v in block):
        return 255, [0x7F] * len(block)
    bits = e8m0_bits(max(abs(v) for v in block), element, rounding)
    return bits, [encode(math.ldexp(v, 127 - bits), element) for v in block]


def mxfp8_dequantize(scale_bits: int, code: int, element: FloatFormat) -> float:
    if scale_bits == 255:
        return math.nan
    return math.ldexp(element.decode(code), scale_bits - 127)


@dataclass(frozen=True)
class NVFP4Reference:
    tensor_scale: float
    block_scale_codes: list[list[int]]
    """One row per input row, one E4M3 code per block (2-D tiles repeated for their rows)."""
    codes: list[list[int]]


def nvfp4(
    rows: Sequence[Sequence[float]],
    *,
    two_d_blocks: bool = False,
    uniforms: Sequence[Sequence[float]] | None = None,
) -> NVFP4Reference:
    """NVFP4 of a matrix, with TE's order of float32 roundings (see nvfp4.py)."""
    n_rows, n_cols = len(rows), len(rows[0])
    if not all(math.isfinite(v) for row in rows for v in row):
        blocks = n_cols // 16
        nan = [[E4M3.nan_code] * blocks for _ in rows]
        return NVFP4Reference(math.nan, nan, [[0] * n_cols for _ in rows])
    tensor_amax = max(abs(v) for row in rows for v in row)
    encode_scale = f32(2688.0 / tensor_amax) if tensor_amax else math.inf
    encode_scale = min(encode_scale, FLOAT32_MAX) or 1.0
    decode_scale = f32(1.0 / encode_scale)
    factor = f32(encode_scale * f32(1.0 / 6.0))

    def block_amax(r: int, b: int) -> float:
        row_range = range(r - r % 16, r - r % 16 + 16) if two_d_blocks else range(r, r + 1)
        return max(abs(rows[i][j]) for i in row_range for j in range(16 * b, 16 * b + 16))

    scale_codes, codes = [], []
    for r in range(n_rows):
        row_scales, row_codes = [], []
        for b in range(n_cols // 16):
            scale_code = encode(min(f32(block_amax(r, b) * factor), 448.0), E4M3)
            product = f32(E4M3.decode(scale_code) * decode_scale)
            block_encode = min(f32(1.0 / product) if product else math.inf, FLOAT32_MAX)
            row_scales.append(scale_code)
            for j in range(16 * b, 16 * b + 16):
                scaled = min(max(f32(rows[r][j] * block_encode), -6.0), 6.0)
                if scaled == 0.0:  # keep the sign of a zero product, as max/min may not
                    scaled = math.copysign(0.0, rows[r][j])
                draw = None if uniforms is None else uniforms[r][j]
                row_codes.append(encode(scaled, E2M1, draw))
        scale_codes.append(row_scales)
        codes.append(row_codes)
    return NVFP4Reference(decode_scale, scale_codes, codes)
