"""MXFP8 quantization held bit for bit to the scalar reference, plus the cases the format's
choices are about: saturation under each scale rounding, zeros, subnormals, non-finite blocks."""

import itertools
import math

import pytest
import torch

from crucible.training.precision import reference
from crucible.training.precision.mxfp8 import ELEMENT_MAX, fake_quantize_mxfp8, quantize_mxfp8

ELEMENTS = ("e4m3", "e5m2")
ROUNDINGS = ("floor", "ceil")


def _normal(g: torch.Generator) -> torch.Tensor:
    return torch.randn(8, 128, generator=g)


def _heavy_tailed(g: torch.Generator) -> torch.Tensor:
    # A ratio of normals is Cauchy: a few values per block dwarf the rest.
    return torch.randn(8, 128, generator=g) / torch.randn(8, 128, generator=g)


def _with_zeros_and_zero_blocks(g: torch.Generator) -> torch.Tensor:
    x = torch.randn(8, 128, generator=g)
    x[torch.rand(8, 128, generator=g) < 0.3] = 0.0
    x[2, 32:64] = 0.0
    x[5, 64:96] = -0.0
    return x


def _spanning_magnitudes(g: torch.Generator) -> torch.Tensor:
    # Blocks from 1e-30 to 1e30, and within each block values down to fp8's subnormals.
    row_scale = 10.0 ** (torch.rand(8, 1, generator=g) * 60 - 30)
    within = 2.0 ** -(torch.rand(8, 128, generator=g) * 14)
    return torch.randn(8, 128, generator=g).sign() * within * row_scale


def _float32_subnormals(g: torch.Generator) -> torch.Tensor:
    # amax below float32's normal range: the scale clamps at 2**-127.
    return torch.randn(4, 64, generator=g) * 1e-39


def _bf16(g: torch.Generator) -> torch.Tensor:
    return torch.randn(2, 3, 64, generator=g).bfloat16()


DISTRIBUTIONS = [
    _normal,
    _heavy_tailed,
    _with_zeros_and_zero_blocks,
    _spanning_magnitudes,
    _float32_subnormals,
    _bf16,
]


def assert_matches_reference(x: torch.Tensor, element: str, rounding: str) -> None:
    q = quantize_mxfp8(x, element=element, scale_rounding=rounding)  # type: ignore[arg-type]
    fmt = reference.FORMATS[element]
    rows = x.float().reshape(-1, x.shape[-1]).tolist()
    codes = q.elements.view(torch.uint8).reshape(len(rows), -1).tolist()
    scale_bits = q.scale_bits.reshape(len(rows), -1).tolist()
    dequantized = q.dequantize().reshape(len(rows), -1).tolist()
    for r, row in enumerate(rows):
        for b in range(len(row) // 32):
            want_bits, want_codes = reference.mxfp8_block(row[32 * b : 32 * b + 32], fmt, rounding)
            assert scale_bits[r][b] == want_bits, (r, b)
            assert codes[r][32 * b : 32 * b + 32] == want_codes, (r, b)
            want_values = [reference.mxfp8_dequantize(want_bits, c, fmt) for c in want_codes]
            got_values = dequantized[r][32 * b : 32 * b + 32]
            assert got_values == pytest.approx(want_values, rel=0, abs=0, nan_ok=True)


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("make", DISTRIBUTIONS, ids=lambda f: f.__name__.strip("_"))
def test_quantization_is_bitwise_equal_to_the_reference(element, rounding, make) -> None:
    assert_matches_reference(make(torch.Generator().manual_seed(0)), element, rounding)


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_ties_round_to_the_even_code_and_the_max_saturates(element, rounding) -> None:
    fmt = reference.FORMATS[element]
    values = [v for v, _ in fmt.finite_magnitudes()]
    midpoints = torch.tensor([(a + b) / 2 for a, b in itertools.pairwise(values)])
    g = torch.Generator().manual_seed(1)
    blocks = []
    for k in (-20, -3, 0, 7, 20):
        # amax exactly at the format max times 2**k: both roundings pick scale 2**k, so the
        # midpoints stay midpoints after scaling.
        block = midpoints[torch.randint(len(midpoints), (32,), generator=g)]
        block[0] = fmt.max
        signs = torch.randint(0, 2, (32,), generator=g) * 2 - 1
        blocks.append(block * signs * 2.0**k)
        # Above the max: saturates under "floor", rescales under "ceil".
        blocks.append(torch.linspace(fmt.max, 2 * fmt.max * 0.99, 32) * 2.0**k)
    x = torch.stack(blocks)
    assert_matches_reference(x, element, rounding)


def test_scale_rounding_decides_whether_the_block_max_saturates() -> None:
    x = torch.full((1, 32), 0.5)
    x[0, 0] = 500.0  # floor(log2(500)) = 8 = E4M3's emax: scale 1, and 500 > 448
    floor = quantize_mxfp8(x, scale_rounding="floor")
    assert floor.scale_bits.tolist() == [[127]]
    assert floor.dequantize()[0, 0].item() == 448.0
    assert floor.saturated[0, 0].item() and floor.saturated.sum().item() == 1
    ceil = quantize_mxfp8(x, scale_rounding="ceil")
    assert ceil.scale_bits.tolist() == [[128]]  # 500 / 448 rounds up to 2**1
    assert ceil.dequantize()[0, 0].item() == 512.0  # 250 rounds to 256 (E4M3 steps of 16)
    assert not ceil.saturated.any()


@pytest.mark.parametrize(
    ("element", "rounds_to_max", "clipped"), [("e4m3", 464.0, 465.0), ("e5m2", 61000.0, 61440.0)]
)
def test_a_value_that_rounds_to_the_max_anyway_is_not_saturated(
    element, rounds_to_max, clipped
) -> None:
    """Between the max and the midpoint to the next value its grid would have, a value
    rounds to the max whether or not the format stops there; past it, the max clips it."""
    x = torch.full((2, 32), 0.5)
    x[0, 0], x[1, 0] = rounds_to_max, clipped  # "floor" keeps scale 2**0 for both
    q = quantize_mxfp8(x, element=element, scale_rounding="floor")
    assert q.scale_bits.tolist() == [[127], [127]]
    assert q.dequantize()[:, 0].tolist() == [ELEMENT_MAX[element]] * 2
    assert q.saturated[:, 0].tolist() == [False, True] and q.saturated.sum().item() == 1


def test_an_all_zero_block_gets_the_smallest_scale() -> None:
    q = quantize_mxfp8(torch.zeros(2, 32), scale_rounding="floor")
    assert q.scale_bits.tolist() == [[0], [0]]
    assert q.dequantize().abs().max().item() == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_makes_only_its_block_nan(bad) -> None:
    x = torch.randn(2, 64)
    x[1, 40] = bad
    q = quantize_mxfp8(x, scale_rounding="ceil")
    assert q.scale_bits[1, 1].item() == 255
    back = q.dequantize()
    assert back[1, 32:].isnan().all()
    assert torch.isfinite(back[0]).all() and torch.isfinite(back[1, :32]).all()
    assert not q.saturated.any()


@pytest.mark.parametrize("element", ELEMENTS)
def test_round_trip_error_is_within_half_an_ulp_of_the_element_format(element) -> None:
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(2))
    back = fake_quantize_mxfp8(x, element=element, scale_rounding="ceil")
    mantissa_bits = {"e4m3": 3, "e5m2": 2}[element]
    # Normal elements (scaled magnitude >= 2**-6 of the max) are within half an ulp.
    block_max = x.abs().reshape(64, 8, 32).amax(-1).repeat_interleave(32, -1)
    normal = x.abs() > block_max * 2.0**-6
    rel = ((back - x).abs() / x.abs())[normal]
    assert rel.max().item() <= 2.0 ** -(mantissa_bits + 1)


def test_a_last_dimension_off_the_block_is_refused_naming_the_shape() -> None:
    with pytest.raises(ValueError, match=r"blocks of 32.*\(4, 48\)"):
        quantize_mxfp8(torch.randn(4, 48), scale_rounding="floor")


def test_an_unknown_scale_rounding_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_rounding='up'"):
        quantize_mxfp8(torch.randn(1, 32), scale_rounding="up")  # type: ignore[arg-type]
