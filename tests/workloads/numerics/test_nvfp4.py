"""NVFP4 quantization held bit for bit to the scalar reference (1x16 and 16x16 blocks, nearest
and stochastic rounding), the E2M1 ties, non-finite input, and stochastic rounding's lack of
bias."""

import math

import pytest
import torch

from crucible.training.precision import reference
from crucible.training.precision.nvfp4 import fake_quantize_nvfp4, quantize_nvfp4


def _normal(g: torch.Generator) -> torch.Tensor:
    return torch.randn(32, 64, generator=g)


def _heavy_tailed(g: torch.Generator) -> torch.Tensor:
    return torch.randn(32, 64, generator=g) / torch.randn(32, 64, generator=g)


def _with_zeros_and_zero_blocks(g: torch.Generator) -> torch.Tensor:
    x = torch.randn(32, 64, generator=g)
    x[torch.rand(32, 64, generator=g) < 0.3] = 0.0
    x[0:16, 16:32] = 0.0
    x[20, 32:48] = -0.0
    return x


def _flushed_blocks(g: torch.Generator) -> torch.Tensor:
    # Rows 1e-7 of the tensor's amax: their E4M3 block scales underflow to zero or subnormals.
    x = torch.randn(32, 64, generator=g)
    x[8:24] *= 10.0 ** -(torch.rand(16, 1, generator=g) * 8)
    return x


def _bf16_3d(g: torch.Generator) -> torch.Tensor:
    return torch.randn(4, 8, 32, generator=g).bfloat16()


DISTRIBUTIONS = [_normal, _heavy_tailed, _with_zeros_and_zero_blocks, _flushed_blocks, _bf16_3d]


def assert_matches_reference(
    x: torch.Tensor, *, two_d_blocks: bool = False, stochastic: bool = False
) -> None:
    q = quantize_nvfp4(
        x,
        two_d_blocks=two_d_blocks,
        stochastic=stochastic,
        generator=torch.Generator().manual_seed(7),
    )
    uniforms = None
    if stochastic:
        # The quantizer's documented draws, from a generator in the same state.
        draws = torch.rand(x.shape, generator=torch.Generator().manual_seed(7))
        uniforms = draws.reshape(-1, x.shape[-1]).tolist()
    rows = x.float().reshape(-1, x.shape[-1]).tolist()
    want = reference.nvfp4(rows, two_d_blocks=two_d_blocks, uniforms=uniforms)
    assert q.codes.reshape(len(rows), -1).tolist() == want.codes
    assert q.block_scales.view(torch.uint8).reshape(len(rows), -1).tolist() == (
        want.block_scale_codes
    )
    assert q.tensor_scale.item() == pytest.approx(want.tensor_scale, rel=0, abs=0, nan_ok=True)


@pytest.mark.parametrize("stochastic", [False, True], ids=["nearest", "stochastic"])
@pytest.mark.parametrize("make", DISTRIBUTIONS, ids=lambda f: f.__name__.strip("_"))
def test_1x16_quantization_is_bitwise_equal_to_the_reference(make, stochastic) -> None:
    x = make(torch.Generator().manual_seed(0))
    assert_matches_reference(x, stochastic=stochastic)


@pytest.mark.parametrize("make", DISTRIBUTIONS[:4], ids=lambda f: f.__name__.strip("_"))
def test_16x16_quantization_is_bitwise_equal_to_the_reference(make) -> None:
    assert_matches_reference(make(torch.Generator().manual_seed(1)), two_d_blocks=True)


def _ties_block() -> torch.Tensor:
    # Tensor amax 6 * 448 makes the tensor scale 1 and, with block amax 6, the block scale 1:
    # elements are their own scaled values, so these land exactly on E2M1's midpoints.
    x = torch.zeros(1, 32)
    x[0, :16] = torch.tensor(
        [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -5, 0.1, 5.9, 0, -0.0, 3, 4]
    )
    x[0, 16] = 2688.0
    return x


def test_e2m1_ties_go_to_the_even_code() -> None:
    q = quantize_nvfp4(_ties_block())
    assert q.tensor_scale.item() == 1.0
    assert q.block_scales.float().tolist() == [[1.0, 448.0]]
    assert q.codes[0, :16].tolist() == [7, 0, 2, 2, 4, 4, 6, 6, 8, 14, 0, 7, 0, 8, 5, 6]
    assert q.codes[0, 16].item() == 7
    assert_matches_reference(_ties_block())


def test_block_scales_round_in_te_order() -> None:
    # block_amax * (tensor_encode * (1/6)) and (block_amax / 6) * tensor_encode differ in the
    # last float32 bit here, and that bit decides the E4M3 rounding: TE's order gives code 122.
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 16] = 4.450499057769775, 6.55863094329834
    assert quantize_nvfp4(x).block_scales.view(torch.uint8).tolist() == [[122, 126]]
    assert_matches_reference(x)


def test_the_tensor_amax_maps_to_the_top_of_both_scales() -> None:
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3)) * 1e-3
    q = quantize_nvfp4(x)
    # The block holding the tensor's amax gets block scale 448 and the amax itself 6.
    assert q.tensor_scale.item() == pytest.approx(x.abs().max().item() / 2688, rel=1e-6)
    assert q.block_scales.float().max().item() == 448.0
    back = q.dequantize()
    assert back.abs().max().item() == pytest.approx(x.abs().max().item(), rel=1e-6)


def test_an_all_zero_tensor_stays_zero() -> None:
    q = quantize_nvfp4(torch.zeros(4, 32))
    assert q.dequantize().abs().max().item() == 0.0
    assert torch.isfinite(q.tensor_scale)
    assert_matches_reference(torch.zeros(4, 32))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_value_poisons_the_whole_tensor(bad) -> None:
    x = torch.randn(4, 32)
    x[3, 31] = bad
    q = quantize_nvfp4(x)
    assert q.dequantize().isnan().all()
    assert not q.saturated.any()
    assert_matches_reference(x)


def test_stochastic_rounding_is_unbiased_where_nearest_is_not() -> None:
    draws, a = 4000, 3.0
    g = torch.Generator().manual_seed(0)
    row = (torch.rand(64, generator=g) * 2 - 1) * a
    row[::16] = a  # every block's amax is the tensor's: block scales 448, exact enough
    row[1::16] = a * 0.3 / 6  # scaled to 0.3: nearest always says 0.5
    x = row.expand(draws, 64)
    sampled = fake_quantize_nvfp4(x, stochastic=True, generator=g)
    mean = sampled.mean(0)
    stderr = sampled.std(0) / math.sqrt(draws)
    # The block maxima come back exactly but for float32 rounding of the scales: no variance.
    z = (mean - row).abs() / (stderr + 1e-6 * a)
    assert z.max().item() < 5.0
    nearest = fake_quantize_nvfp4(row.unsqueeze(0))[0]
    bias_nearest = (nearest[1::16] - row[1::16]).abs()
    bias_stochastic = (mean[1::16] - row[1::16]).abs()
    assert (bias_nearest > 10 * bias_stochastic).all()


def test_stochastic_rounding_follows_the_generator() -> None:
    x = torch.randn(8, 32)
    first = quantize_nvfp4(x, stochastic=True, generator=torch.Generator().manual_seed(5))
    again = quantize_nvfp4(x, stochastic=True, generator=torch.Generator().manual_seed(5))
    other = quantize_nvfp4(x, stochastic=True, generator=torch.Generator().manual_seed(6))
    assert torch.equal(first.codes, again.codes)
    assert not torch.equal(first.codes, other.codes)


def test_shapes_off_the_blocks_are_refused_naming_the_shape() -> None:
    with pytest.raises(ValueError, match=r"blocks of 16.*\(4, 40\)"):
        quantize_nvfp4(torch.randn(4, 40))
    with pytest.raises(ValueError, match=r"16x16 tiles.*\(8, 32\)"):
        quantize_nvfp4(torch.randn(8, 32), two_d_blocks=True)


def test_a_block_max_its_scale_left_above_6_is_not_saturated_a_clipped_value_is() -> None:
    """A block's amax lands up to 6 * 17/16 after its E4M3 scale's rounding, on most blocks
    of any data, and rounds to 6 anyway: counted, it made every operand of a real run
    "saturate" 3-5% and the alert fire for every nvfp4 run. A block whose scale is an E4M3
    subnormal is clipped for real: 1.4 * 2**-9 rounds to the scale 2**-9, its amax to 8.4."""
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    q = quantize_nvfp4(x)
    assert not q.saturated.any()
    scaled_amax = (x.abs() / (q.largest_magnitude() / 6)).amax()
    assert 6 < scaled_amax.item() <= 6 * 17 / 16

    tiny = torch.zeros(1, 32)
    tiny[0, 0] = 2688.0  # the tensor's amax: tensor scale 1, block factor 1/6
    tiny[0, 16:] = 6 * 1.4 * 2.0**-9 * torch.linspace(0.5, 1.0, 16)
    clipped = quantize_nvfp4(tiny)
    assert clipped.block_scales.float()[0, 1].item() == 2.0**-9
    assert clipped.saturated[0].tolist() == [False] * 16 + [
        v >= 7 for v in (8.4 * torch.linspace(0.5, 1.0, 16)).tolist()
    ]
    assert clipped.dequantize()[0, 31].item() == 6 * 2.0**-9
