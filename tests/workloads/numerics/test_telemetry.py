"""Saturation and underflow shares, as a trainer would log them."""

import pytest
import torch
from torch import nn

from crucible.training.precision.emulated_linear import EmulatedLinear
from crucible.training.precision.recipes import MXFP8Recipe
from crucible.training.precision.telemetry import numerics_stats


def _input_with_an_outlier() -> torch.Tensor:
    x = torch.full((32, 32), 1e-6)
    x[:, 0] = 500.0  # above E4M3's 448 at scale 1, the scale "floor" picks
    return x


@pytest.mark.parametrize(("rounding", "saturated"), [("floor", 1 / 32), ("ceil", 0.0)])
def test_saturation_is_the_share_clipped_at_the_format_max(rounding, saturated) -> None:
    layer = EmulatedLinear(32, 32, recipe=MXFP8Recipe(scale_rounding=rounding))
    x = _input_with_an_outlier().requires_grad_()
    layer(x).sum().backward()
    stats = numerics_stats(nn.Sequential(layer))
    assert stats["numerics/0/input_saturated"] == pytest.approx(saturated)
    # 1e-6 against a block scale of 2**0 or 2**1 is far below E4M3's smallest subnormal.
    assert stats["numerics/0/input_underflow"] == pytest.approx(31 / 32)
    assert stats["numerics/0/weight_underflow"] == 0.0
    assert stats["numerics/0/grad_output_saturated"] == 0.0
    assert "numerics/0/input_t_underflow" in stats
    assert stats["numerics/0/input_amax"] == 500.0


def test_a_sampled_layer_reports_its_gemm_error_against_bf16() -> None:
    torch.manual_seed(0)
    layer = EmulatedLinear(64, 32, recipe=MXFP8Recipe())
    layer.sample_error = True
    x = torch.randn(16, 64)
    y = layer(x)
    # What a bf16 run's GEMM writes: bf16 operands, a bf16 result.
    reference = (x.bfloat16() @ layer.weight.detach().bfloat16().t()).float()
    expected = (y - layer.bias - reference).norm() / reference.norm()
    stats = numerics_stats(nn.Sequential(layer), sampled=True)
    assert stats["numerics/0/matmul_rel_error"] == pytest.approx(expected.item(), rel=1e-3)
    assert 0.001 < stats["numerics/0/matmul_rel_error"] < 0.2
    assert "numerics/0/matmul_rel_error" not in numerics_stats(nn.Sequential(layer))


def test_a_model_without_emulated_layers_reports_nothing() -> None:
    assert numerics_stats(nn.Sequential(nn.Linear(32, 32))) == {}
