"""Row-, tile- and block-scaled FP8: each quantizer bitwise equal to the scalar reference's
encoding under the same scale, the emulated scaled GEMM within bf16's rounding of a float64
product, and the layer's three GEMMs built from the operands DeepSeek-V3's recipe names."""

import math

import pytest
import torch
from torch import nn

from crucible.training.precision import reference
from crucible.training.precision.fp8_scaled import (
    ScaledFloat8Linear,
    convert_to_scaled_float8,
    scaled_float8_stats,
)
from crucible.training.precision.fp8_scaling import TILE, Granularity, quantize
from crucible.training.precision.scaled_matmul import SUPPORTED, pad_reduction, scaled_matmul

BF16_UNIT_ROUNDOFF = 2.0**-8


def reference_codes(x: torch.Tensor, granularity: Granularity) -> tuple[list[int], list[float]]:
    """Every element's E4M3 code and scale, group by group, in pure Python."""
    rows, cols = x.shape
    values = x.tolist()

    def group_of(i: int, j: int) -> tuple[int, int]:
        return {
            "tensor": (0, 0),
            "row": (i, 0),
            "tile": (i, j // TILE),
            "block": (i // TILE, j // TILE),
        }[granularity]

    amax: dict[tuple[int, int], float] = {}
    for i in range(rows):
        for j in range(cols):
            key = group_of(i, j)
            amax[key] = max(amax.get(key, 0.0), abs(values[i][j]))
    scale = {k: reference.f32(448.0 / max(a, 1e-12)) for k, a in amax.items()}
    codes = [
        reference.encode(reference.f32(values[i][j] * scale[group_of(i, j)]), reference.E4M3)
        for i in range(rows)
        for j in range(cols)
    ]
    return codes, [scale[group_of(i, j)] for i in range(rows) for j in range(cols)]


def wide_range(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Values over many binades with a few outliers, and one all-zero tile."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(
        torch.randint(-20, 8, (rows, 1), generator=g)
    )
    x[0, 5] = 3.0e4
    x[-1, :TILE] = 0.0
    return x


@pytest.mark.parametrize("granularity", ["tensor", "row", "tile", "block"])
def test_each_granularity_is_bitwise_the_references_encoding(granularity: Granularity) -> None:
    x = wide_range(2 * TILE, 2 * TILE, seed=7)
    q = quantize(x, granularity)

    codes, scales = reference_codes(x, granularity)
    assert q.data.view(torch.uint8).flatten().tolist() == codes
    per_element = q.scale if granularity in ("tensor", "row") else None
    if per_element is None:
        factor = TILE if granularity == "block" else 1
        per_element = q.scale.repeat_interleave(TILE, 1).repeat_interleave(factor, 0)
    assert per_element.expand_as(x).flatten().tolist() == scales


@pytest.mark.parametrize("granularity", ["tensor", "block"])
def test_a_transposed_operand_is_bitwise_the_quantized_transpose(granularity: Granularity) -> None:
    x = wide_range(2 * TILE, 3 * TILE, seed=4)
    transposed = quantize(x, granularity).transpose()
    direct = quantize(x.t(), granularity)
    assert torch.equal(transposed.data.view(torch.uint8), direct.data.view(torch.uint8))
    assert torch.equal(transposed.scale, direct.scale)
    assert transposed.data.is_contiguous()


def test_a_tile_scaled_operand_cannot_be_transposed() -> None:
    with pytest.raises(ValueError, match="tile-scaled operand changes groups"):
        quantize(torch.ones(TILE, TILE), "tile").transpose()


def test_a_zero_tile_gets_a_finite_scale_and_zero_codes() -> None:
    x = wide_range(TILE, 2 * TILE, seed=1)
    q = quantize(x, "tile")
    assert math.isfinite(q.scale[-1, 0].item())
    assert not q.data[-1, :TILE].float().any()
    assert torch.equal(q.dequantize()[-1, :TILE], torch.zeros(TILE))


def test_finer_scales_keep_small_rows_that_one_tensor_scale_flushes() -> None:
    x = wide_range(TILE, 2 * TILE, seed=3)
    lost = {
        g: ((x != 0) & (quantize(x, g).dequantize() == 0)).float().mean().item()
        for g in ("tensor", "tile")
    }
    assert lost["tensor"] > 0.1
    assert lost["tile"] == 0.0


@pytest.mark.parametrize(("granularity", "shape"), [("tile", (4, 100)), ("block", (100, 128))])
def test_a_shape_the_tiles_do_not_divide_is_refused_naming_it(
    granularity: Granularity, shape: tuple[int, int]
) -> None:
    with pytest.raises(ValueError, match=rf"got shape \({shape[0]}, {shape[1]}\)"):
        quantize(torch.ones(shape), granularity)


@pytest.mark.parametrize("pair", sorted(SUPPORTED))
def test_the_emulated_scaled_gemm_is_the_float64_product_rounded_to_bf16(
    pair: tuple[Granularity, Granularity],
) -> None:
    g = torch.Generator().manual_seed(0)
    a = quantize(torch.randn(2 * TILE, 3 * TILE, generator=g) * 5, pair[0])
    b = quantize(torch.randn(TILE, 3 * TILE, generator=g) / 7, pair[1])

    out = scaled_matmul(a, b, native=False)

    a64, b64 = a.dequantize().double(), b.dequantize().double()
    exact = a64 @ b64.t()
    # float32 accumulation over K terms errs by at most K * 2**-24 of sum(|a| |b|).
    accumulation = a64.shape[1] * 2.0**-24 * (a64.abs() @ b64.abs().t())
    bound = exact.abs() * BF16_UNIT_ROUNDOFF + accumulation * (1 + BF16_UNIT_ROUNDOFF)
    assert out.dtype == torch.bfloat16
    assert ((out.double() - exact).abs() <= bound).all()
    assert (out.double() - exact).abs().max() > 0


@pytest.mark.parametrize("blocks", [6, 18, 8])
def test_padding_k_to_whole_groups_of_four_blocks_leaves_the_product_as_it_was(blocks: int) -> None:
    """Widths of 768 or 2304 (6 or 18 blocks) are padded to 8 or 20 blocks for cuBLAS's
    128x128 scale layout; 8 blocks need none."""
    g = torch.Generator().manual_seed(2)
    a = quantize(torch.randn(TILE, blocks * TILE, generator=g), "tile")
    b = quantize(torch.randn(2 * TILE, blocks * TILE, generator=g), "block")
    a_padded, b_padded = pad_reduction(a), pad_reduction(b)

    padded_blocks = -(-blocks // 4) * 4
    assert a_padded.data.shape == (TILE, padded_blocks * TILE)
    assert b_padded.scale.shape == (2, padded_blocks)
    assert not a_padded.data[:, blocks * TILE :].float().any()
    assert (blocks == padded_blocks) == (a_padded is a)
    unpadded = scaled_matmul(a, b, native=False)
    assert torch.equal(scaled_matmul(a_padded, b_padded, native=False), unpadded)


def test_an_unsupported_pair_of_scalings_is_refused() -> None:
    x = quantize(torch.ones(TILE, TILE), "row")
    with pytest.raises(ValueError, match="a row operand by a block one"):
        scaled_matmul(x, quantize(torch.ones(TILE, TILE), "block"), native=False)


def test_block_scaled_gradients_are_the_products_of_deepseeks_operands() -> None:
    """dgrad: the gradient in 1x128 tiles times the weight in 128x128 blocks; wgrad: both
    in tiles along the tokens, whose count (200) is padded to a whole tile."""
    torch.manual_seed(0)
    layer = ScaledFloat8Linear(256, 128, bias=False, scaling="block", native=False)
    x = torch.randn(200, 256, requires_grad=True)
    dy = torch.randn(200, 128)
    layer(x).backward(dy)

    def product(a: torch.Tensor, ga: Granularity, b: torch.Tensor, gb: Granularity) -> torch.Tensor:
        exact = quantize(a, ga).dequantize() @ quantize(b, gb).dequantize().t()
        return exact.to(torch.bfloat16).float()

    # The GEMM writes bf16, as the kernel does, so its gradient arrives in bf16.
    dy = dy.to(torch.bfloat16).float()
    pad = torch.nn.functional.pad
    assert torch.equal(x.grad, product(dy, "tile", layer.weight.detach().t(), "block"))
    wgrad = product(pad(dy.t(), (0, 56)), "tile", pad(x.detach().t(), (0, 56)), "tile")
    assert torch.equal(layer.weight.grad, wgrad)
    assert x.grad is not None and torch.allclose(
        x.grad, dy @ layer.weight.detach(), rtol=0.1, atol=0.1
    )


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_a_converted_model_trains_and_reports_amax_and_sampled_error(scaling: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128))
    assert convert_to_scaled_float8(model, scaling, native=False) == 2  # type: ignore[arg-type]
    layers = [m for m in model if isinstance(m, ScaledFloat8Linear)]
    for layer in layers:
        layer.sample_error = True
    x = torch.randn(64, 128)
    model(x).square().mean().backward()

    stats = scaled_float8_stats(model, sampled=True)
    assert stats["fp8/0/input_amax"] == x.abs().max().item()
    assert stats["fp8/0/grad_amax"] > 0
    assert 0 < stats["fp8/0/matmul_rel_error"] < 0.1
    assert "fp8/0/matmul_rel_error" not in scaled_float8_stats(model, sampled=False)


def test_a_block_scaled_layer_refuses_widths_that_are_not_whole_tiles() -> None:
    with pytest.raises(ValueError, match="divisible by 128; got 64x128"):
        ScaledFloat8Linear(64, 128, scaling="block", native=False)
