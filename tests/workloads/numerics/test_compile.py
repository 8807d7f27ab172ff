"""The low-precision layers under torch.compile: traced whole (no graph break), and computing
what the eager layers compute."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from crucible.training.precision.emulated_linear import (
    convert_to_emulated,
    load_rounding_states,
    rounding_states,
)
from crucible.training.precision.fp8_scaled import convert_to_scaled_float8
from crucible.training.precision.recipes import MXFP8Recipe, NVFP4Recipe, OperandQuantizer
from crucible.training.precision.telemetry import OPERANDS


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


# The trainer compiles fine-scaled fp8 layers whole; the emulated formats' roundings it compiles
# on their own (test_compiled_roundings_...), but a model holding emulated layers still
# compiles whole, as the stochastic nvfp4 test below shows.
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fp8-block"])
def test_a_layer_compiles_without_a_graph_break_and_matches_eager(kind: str) -> None:
    model = _model(kind)
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    counters = rounding_states(model)
    compiled_loss, compiled_grad = _loss_and_grad(torch.compile(model), x)
    # The eager pass takes the same draws as the compiled one did.
    load_rounding_states(model, counters)
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
def test_nvfp4s_stochastic_rounding_compiles_whole_and_reproducibly() -> None:
    """Its draws are integer ops on a counter (counter_rng.py), which dynamo traces where a
    torch.Generator would break the graph. A compiled backward may take the stream's next
    draw rather than the eager one's (the partitioner recomputes the counter's step), so
    compiled and eager runs round differently, each the same way every time."""
    model = _model("nvfp4")
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    compiled = torch.compile(model)
    counters = rounding_states(model)
    first_loss, first_grad = _loss_and_grad(compiled, x)
    load_rounding_states(model, counters)
    again_loss, again_grad = _loss_and_grad(compiled, x)
    assert (again_loss, torch.equal(again_grad, first_grad)) == (first_loss, True)
    next_loss, next_grad = _loss_and_grad(compiled, x)
    assert next_loss == first_loss and not torch.equal(next_grad, first_grad)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mxfp8-floor-e5m2", "nvfp4"])
def test_compiled_roundings_give_the_eager_roundings_bits(name: str) -> None:
    """What a run with `compile` and an emulated precision uses (`compiles_whole_model`):
    every operand, stochastic rounding and the Hadamard transform included, on shapes that
    share the compiled graphs, rounds to the eager quantizer's bits."""
    recipe = (
        NVFP4Recipe()
        if name == "nvfp4"
        else MXFP8Recipe(scale_rounding="floor", grad_element="e5m2")
    )
    eager = OperandQuantizer(recipe, layer_seed=3)
    compiled = OperandQuantizer(recipe, layer_seed=3, compiled=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    generator = torch.Generator().manual_seed(0)
    for shape in ((128, 256), (96, 512)):
        wide = torch.randn(shape, generator=generator) * torch.exp2(
            torch.randint(-30, 30, shape, generator=generator).float()
        )
        wide[::5] = 0
        for operand in OPERANDS:
            counter = torch.tensor(7)
            want, got = eager(operand, wide, counter), compiled(operand, wide, counter)
            assert torch.equal(got.values, want.values), (shape, operand)
            if want.tensor_scale is not None:
                assert torch.equal(got.tensor_scale, want.tensor_scale), (shape, operand)
            assert torch.equal(got.stats, want.stats), (shape, operand)
    # One graph per combination of the format's options, whatever the shape or layer.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= (3 if name == "nvfp4" else 2)


def test_importing_the_trainer_loads_no_triton() -> None:
    """Triton's bindings print a leak report on stderr at exit; a job that imported it only
    through compiled_rounding.py's module level ended its log with that report instead of
    its own error (tests/workloads/test_environment_jobs.py failed on it)."""
    probe = (
        "import sys; import crucible.training.train, crucible.rollouts.rollout; "
        "print('triton' in sys.modules)"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "False"
