"""The low-precision layers under torch.compile: traced whole (no graph break) where nothing
opaque is drawn, and computing what the eager layers compute."""

import pytest
import torch
from torch import nn

from crucible.workloads.fp8_scaled import convert_to_scaled_float8
from crucible.workloads.numerics.emulated_linear import convert_to_emulated


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
    if kind.startswith("fp8-"):
        convert_to_scaled_float8(model, kind.removeprefix("fp8-"), native=False)  # type: ignore[arg-type]
    else:
        convert_to_emulated(model, kind)  # type: ignore[arg-type]
    return model


def _loss_and_grad(model: nn.Module, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    model.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    first = next(model.parameters())
    assert first.grad is not None
    return loss.item(), first.grad.clone()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fp8-block", "fp8-row", "mxfp8"])
def test_a_layer_compiles_without_a_graph_break_and_matches_eager(kind: str) -> None:
    model = _model(kind)
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    compiled_loss, compiled_grad = _loss_and_grad(torch.compile(model), x)
    eager_loss, eager_grad = _loss_and_grad(model, x)
    # Inductor may fuse the float32 arithmetic around the roundings differently.
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-4)
    assert torch.allclose(compiled_grad, eager_grad, rtol=1e-2, atol=1e-5)

    # A sampled step measures the GEMM error in the compiled graph too.
    first = next(m for m in model.modules() if hasattr(m, "sample_error"))
    first.sample_error = True
    _loss_and_grad(torch.compile(model), x)
    assert 0 < first.get_buffer("matmul_rel_error").item() < 0.1


@pytest.mark.slow
def test_nvfp4_compiles_breaking_the_graph_at_its_stochastic_rounding_draws() -> None:
    """Each layer draws its gradient's rounding from its own torch.Generator, which dynamo
    cannot trace; the graph breaks there and runs that part eagerly, still correct."""
    model = _model("nvfp4")
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    _loss_and_grad(model, x)  # the generators exist from the first backward on
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count > 0
    assert all("Generator" in str(reason.reason) for reason in explained.break_reasons)

    compiled_loss, compiled_grad = _loss_and_grad(torch.compile(model), x)
    eager_loss, _ = _loss_and_grad(model, x)
    assert compiled_loss == eager_loss
    assert torch.isfinite(compiled_grad).all() and compiled_grad.abs().sum() > 0
