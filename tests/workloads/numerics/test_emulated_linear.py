"""The emulated Linear: its forward is exactly the rounded matmul, its gradients stay near
nn.Linear's, a converted model trains like the float32 one, and the telemetry reads out."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.training.precision.emulated_linear import EmulatedLinear, convert_to_emulated
from crucible.training.precision.mxfp8 import fake_quantize_mxfp8
from crucible.training.precision.nvfp4 import quantize_nvfp4
from crucible.training.precision.recipes import MXFP8Recipe, NVFP4Recipe, OperandQuantizer
from crucible.training.precision.telemetry import OPERANDS, STATS, numerics_stats

RECIPES = {
    "mxfp8": MXFP8Recipe(),
    "mxfp8-floor-hybrid": MXFP8Recipe(scale_rounding="floor", grad_element="e5m2"),
    "nvfp4": NVFP4Recipe(),
    "nvfp4-plain": NVFP4Recipe(stochastic_rounding=False, hadamard=False, weight_2d_blocks=False),
}
# Relative error bounds for y, dx, dw. E4M3 keeps 3 mantissa bits, E2M1 one. "floor" scaling
# clips nn.Linear's uniform weights at the top of each binade, E5M2 gradients lose a bit, and
# stochastic rounding trades bias for variance: each costs some accuracy here.
TOLERANCE = {
    "mxfp8": (0.05, 0.05, 0.05),
    "mxfp8-floor-hybrid": (0.08, 0.1, 0.08),
    "nvfp4": (0.2, 0.25, 0.25),
    "nvfp4-plain": (0.2, 0.2, 0.2),
}


def _pair(recipe, in_features=64, out_features=32):
    torch.manual_seed(0)
    reference = nn.Linear(in_features, out_features)
    layer = EmulatedLinear(in_features, out_features, recipe=recipe)
    layer.load_state_dict(reference.state_dict())
    return reference, layer


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_the_forward_pass_is_exactly_the_block_scaled_matmul_of_the_rounded_operands() -> None:
    _, mx = _pair(MXFP8Recipe(scale_rounding="floor"))
    _, nv = _pair(NVFP4Recipe())
    x = torch.randn(3, 32, 64)
    flat = x.reshape(-1, 64)
    want_mx = (
        fake_quantize_mxfp8(flat, scale_rounding="floor")
        @ fake_quantize_mxfp8(mx.weight, scale_rounding="floor").t()
    )
    assert torch.equal(mx(x), (want_mx + mx.bias).reshape(3, 32, 32))
    # NVFP4's tensor scales multiply the product, as the kernels' epilogue applies them:
    # within float32 rounding of multiplying the fully dequantized operands.
    x_nv, w_nv = quantize_nvfp4(flat), quantize_nvfp4(nv.weight.detach(), two_d_blocks=True)
    product = x_nv.block_values() @ w_nv.block_values().t()
    want_nv = product * (x_nv.tensor_scale * w_nv.tensor_scale)
    assert torch.equal(nv(x), (want_nv + nv.bias).reshape(3, 32, 32))
    dequantized = x_nv.dequantize() @ w_nv.dequantize().t()
    torch.testing.assert_close(want_nv, dequantized, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", RECIPES)
def test_every_operands_values_are_exact_in_bf16(name) -> None:
    """What lets a GPU multiply them on bf16 tensor cores (`block_scaled_gemm`): every
    operand of the three GEMMs, on data spanning 2**-100 to 2**100, survives bf16."""
    quantize = OperandQuantizer(RECIPES[name])
    torch.manual_seed(0)
    wide = torch.randn(64, 64) * torch.exp2(torch.randint(-100, 100, (64, 64)).float())
    counter = torch.tensor(1)
    for operand in OPERANDS:
        quantized = quantize(operand, wide, counter)
        assert torch.equal(quantized.values.bfloat16().float(), quantized.values), operand


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("tokens", [96, 50], ids=["whole-blocks", "padded-blocks"])
def test_gradients_flow_and_stay_near_nn_linear(name, tokens) -> None:
    reference, layer = _pair(RECIPES[name])
    x = torch.randn(tokens, 64)
    x_ref, x_emu = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(tokens, 32)
    y_ref, y = reference(x_ref), layer(x_emu)
    (y_ref * grad).sum().backward()
    (y * grad).sum().backward()
    y_tol, dx_tol, dw_tol = TOLERANCE[name]
    assert _rel(y, y_ref) < y_tol
    assert _rel(x_emu.grad, x_ref.grad) < dx_tol
    assert _rel(layer.weight.grad, reference.weight.grad) < dw_tol
    assert torch.equal(layer.bias.grad, reference.bias.grad)  # the bias is never rounded


def test_the_hadamard_transform_cancels_in_the_weight_gradient() -> None:
    # Without rounding noise in the way (no stochastic rounding, 2-D blocks off), the transform
    # changes the rounded operands but their product still approximates the true wgrad.
    plain = NVFP4Recipe(stochastic_rounding=False, hadamard=False)
    rotated = NVFP4Recipe(stochastic_rounding=False, hadamard=True)
    x, grad = torch.randn(64, 64), torch.randn(64, 32)
    grads = []
    for recipe in (plain, rotated):
        _, layer = _pair(recipe)
        (layer(x) * grad).sum().backward()
        grads.append(layer.weight.grad)
    true = grad.t() @ x
    assert not torch.equal(grads[0], grads[1])
    assert _rel(grads[1], true) < 0.3
    assert _rel(grads[0], true) < 0.3


def test_autocast_rounds_the_bf16_input_and_returns_bf16() -> None:
    _, layer = _pair(MXFP8Recipe())
    x = torch.randn(32, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad is not None and layer.weight.grad.dtype == torch.float32


def test_convert_swaps_the_block_linears_and_keeps_the_state_dict() -> None:
    model = build_model(model_preset("tiny"))
    keys = set(model.state_dict())
    swapped = convert_to_emulated(model, "nvfp4")
    assert swapped == 4 * model.config.n_layer  # qkv, proj, up, down per block
    assert type(model.lm_head) is nn.Linear  # tied to the embedding: stays full precision
    assert set(model.state_dict()) == keys
    layers = [m for m in model.modules() if isinstance(m, EmulatedLinear)]
    assert all(isinstance(m.recipe, NVFP4Recipe) for m in layers)


def test_convert_refuses_widths_off_the_block_and_mismatched_options() -> None:
    with pytest.raises(ValueError, match=r"divisible by 32; got 48x64"):
        convert_to_emulated(nn.Sequential(nn.Linear(48, 64)), "mxfp8")
    with pytest.raises(ValueError, match=r"format 'fp4'"):
        convert_to_emulated(nn.Sequential(nn.Linear(64, 64)), "fp4")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'mxfp8' takes a MXFP8Recipe; got NVFP4Recipe"):
        convert_to_emulated(nn.Sequential(nn.Linear(64, 64)), "mxfp8", NVFP4Recipe())


def _train(fmt: str | None, steps: int = 12) -> tuple[list[float], nn.Module]:
    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    if fmt is not None:
        convert_to_emulated(model, fmt)  # type: ignore[arg-type]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    # A repeating pattern the model can learn in a few steps: each row counts up from a start.
    starts = torch.randint(0, 16, (4, 1), generator=g)
    tokens = (starts + torch.arange(33)) % 16
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_a_tiny_model_trains_like_the_float32_one(fmt) -> None:
    baseline, _ = _train(None)
    losses, model = _train(fmt)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.8 * losses[0]
    assert abs(losses[-1] - baseline[-1]) < 0.1 * baseline[-1]
    stats = numerics_stats(model)
    layers = [name for name, m in model.named_modules() if isinstance(m, EmulatedLinear)]
    assert len(stats) == len(layers) * len(OPERANDS) * len(STATS)
    assert all(0.0 <= v <= 1.0 for k, v in stats.items() if not k.endswith("_amax"))
    assert all(v > 0 for k, v in stats.items() if k.endswith("_amax"))
    assert all(isinstance(v, float) for v in stats.values())
