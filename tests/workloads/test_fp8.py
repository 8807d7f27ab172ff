"""FP8 scaling math in float32 on the CPU, the fp8 Linear's autograd against nn.Linear (with
the fp8 matmul emulated, since torch._scaled_mm needs a GPU), and the CPU refusal."""

import pytest
import torch
from torch import nn

from crucible.config.workload import TrainConfig, model_preset
from crucible.training.precision import fp8
from crucible.training.train import Trainer


def test_scale_maps_amax_onto_the_format_maximum() -> None:
    amax = torch.tensor(3.5)
    scale = fp8.scale_from_amax(amax, fp8.E4M3_MAX)
    assert scale.dtype == torch.float32
    assert (amax * scale).item() == pytest.approx(448.0)
    # An all-zero tensor still gets a finite scale.
    assert torch.isfinite(fp8.scale_from_amax(torch.tensor(0.0), fp8.E4M3_MAX))


@pytest.mark.parametrize(("dtype", "max_rel"), [(fp8.E4M3, 2**-4), (fp8.E5M2, 2**-3)])
def test_quantise_dequantise_round_trip_is_within_half_an_ulp(dtype, max_rel) -> None:
    torch.manual_seed(0)
    x = torch.randn(4096) * 10
    fp8_max = float(torch.finfo(dtype).max)
    scale = fp8.scale_from_amax(x.abs().max(), fp8_max)
    back = fp8.dequantize(fp8.quantize(x, scale, dtype), scale)
    # Values in the normal range round to within half an ulp: 2**-4 of the value with e4m3's
    # 3 mantissa bits, 2**-3 with e5m2's 2.
    normal = x.abs() * scale > 2**-6
    rel = ((back - x).abs() / x.abs())[normal]
    assert rel.max().item() <= max_rel + 1e-6
    assert back.abs().max().item() == pytest.approx(x.abs().max().item(), rel=max_rel)


def test_quantise_saturates_instead_of_overflowing() -> None:
    x = torch.tensor([1.0, -1000.0, 1e9])
    q = fp8.quantize(x, torch.tensor(1.0), fp8.E4M3)
    assert torch.isfinite(q.float()).all()
    assert q.float().tolist() == [1.0, -448.0, 448.0]


def _emulated_scaled_mm(a, b, a_scale, b_scale):
    return (fp8.dequantize(a, a_scale) @ fp8.dequantize(b, b_scale)).to(torch.bfloat16)


def test_float8_linear_matches_nn_linear_forward_and_backward(monkeypatch) -> None:
    monkeypatch.setattr(fp8, "_scaled_mm", _emulated_scaled_mm)
    torch.manual_seed(0)
    reference = nn.Linear(64, 32)
    layer = fp8.Float8Linear(64, 32)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(3, 5, 64)
    x_ref, x_fp8 = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(3, 5, 32)
    y_ref = reference(x_ref)
    y = layer(x_fp8)
    (y_ref * grad).sum().backward()
    (y.float() * grad).sum().backward()

    def rel(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    # e4m3 keeps 3 mantissa bits, e5m2 two: a few percent, never a wrong sign or scale.
    assert rel(y, y_ref) < 0.06
    assert rel(x_fp8.grad, x_ref.grad) < 0.15
    assert rel(layer.weight.grad, reference.weight.grad) < 0.15
    assert rel(layer.bias.grad, reference.bias.grad) < 0.01  # added in bf16, no fp8
    stats = fp8.float8_stats(nn.Sequential(layer))
    assert stats["fp8/0/input_amax"] == pytest.approx(x.abs().max().item())
    assert stats["fp8/0/weight_scale"] == pytest.approx(448.0 / layer.weight.abs().max().item())
    assert stats["fp8/0/grad_amax"] > 0


def test_fp8_precision_is_refused_on_the_cpu_with_a_clear_message() -> None:
    records = [{"prompt": "1+1=", "completion": "2"}]
    with pytest.raises(RuntimeError, match=r"fp8.*device cpu.*bf16"):
        Trainer(TrainConfig(precision="fp8"), model_preset("tiny"), records)


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision='fp16'"):
        TrainConfig(precision="fp16")  # type: ignore[arg-type]
