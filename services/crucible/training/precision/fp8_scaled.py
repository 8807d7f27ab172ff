"""FP8 training with finer scales than fp8.py's one per tensor: "row" (a scale per row of each
GEMM operand, torchao's rowwise recipe) and "block" (DeepSeek-V3's: 1x128 tiles for
activations and gradients, 128x128 blocks for weights).

All six GEMM operands are E4M3: with a scale per row or tile, the range E5M2 buys gradients
is not needed (DeepSeek-V3 trains so). Scales run along the dimension each GEMM reduces
over, so the backward pass quantizes x and the gradient again along the other dimension,
from the high-precision x the forward saved (as torchao's rowwise recipe saves it): wgrad
reduces over the tokens, whose count is padded with zeros to a whole tile. The weight is
quantized again for dgrad with row scaling; a 128x128 block is a block of the transpose
too, so block scaling reuses the forward's codes, transposed. On a Hopper
GPU the GEMMs are `torch._scaled_mm`'s fp8 kernels; elsewhere, with `native=False`, they are
emulated in float32 (numerics/scaled_matmul.py), for studying the recipe on any device.
"""

from collections.abc import Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from crucible.training.precision.fp8_scaling import TILE, Granularity, ScaledFloat8, quantize
from crucible.training.precision.linear_swap import swap_linears
from crucible.training.precision.scaled_matmul import scaled_matmul
from crucible.training.precision.telemetry import matmul_relative_error

Scaling = Literal["row", "block"]
OPERAND_GRANULARITY: dict[Scaling, dict[str, Granularity]] = {
    "row": {"activation": "row", "weight": "row"},
    "block": {"activation": "tile", "weight": "block"},
}
"""Inputs and gradients are "activation" operands; the weight is the other."""
STAT_NAMES = ("input_amax", "weight_amax", "grad_amax", "matmul_rel_error")
"""What `scaled_float8_stats` reports per layer; matmul_rel_error only from sampled steps."""


class _ScaledFloat8Matmul(torch.autograd.Function):
    """y = x @ w.T, every GEMM operand in E4M3 at `scaling`; also returns the amax of x and
    of w, and writes the gradient's into `grad_amax`, for the statistics. Everything but the
    tensors is a constant, so torch.compile traces it whole."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: Tensor,
        weight: Tensor,
        grad_amax: Tensor,
        scaling: Scaling,
        native: bool,
    ) -> tuple[Tensor, Tensor]:
        activation, weights = _granularities(scaling)
        x_q = quantize(x, activation)
        w_q = quantize(weight, weights)
        y = scaled_matmul(x_q, w_q, native=native)
        amaxes = torch.stack([x_q.amax, w_q.amax])
        ctx.mark_non_differentiable(amaxes)
        ctx.save_for_backward(x, weight, grad_amax, w_q.data, w_q.scale, w_q.amax)
        ctx.scaling = scaling  # type: ignore[attr-defined]
        ctx.native = native  # type: ignore[attr-defined]
        return y, amaxes

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor, _: Tensor
    ) -> tuple[Tensor, Tensor, None, None, None]:
        x, weight, grad_amax, w_data, w_scale, w_amax = ctx.saved_tensors  # type: ignore[attr-defined]
        scaling: Scaling = ctx.scaling  # type: ignore[attr-defined]
        native: bool = ctx.native  # type: ignore[attr-defined]
        activation, weights = _granularities(scaling)
        g_q = quantize(grad_out, activation)
        if weights == "block":
            # A 128x128 block is a block of the transpose too: the forward's codes serve.
            w_t = ScaledFloat8(w_data, w_scale, weights, w_amax).transpose()
        else:
            w_t = quantize(weight.t(), weights)
        grad_x = scaled_matmul(g_q, w_t, native=native)
        # wgrad reduces over the tokens; zero tokens added to fill the last tile change no
        # tile's amax and add nothing to the product.
        pad = -x.shape[0] % _token_multiple(scaling)
        grad_w = scaled_matmul(
            quantize(F.pad(grad_out.t(), (0, pad)), activation),
            quantize(F.pad(x.t(), (0, pad)), activation),
            native=native,
        )
        if not torch.compiler.is_compiling():
            # Compiled graphs may not mutate a buffer in the backward pass; the gradient's
            # amax is recorded by eager runs only.
            grad_amax.copy_(g_q.amax)
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None, None, None


def _granularities(scaling: Scaling) -> tuple[Granularity, Granularity]:
    roles = OPERAND_GRANULARITY[scaling]
    return roles["activation"], roles["weight"]


def _token_multiple(scaling: Scaling) -> int:
    # _scaled_mm needs K divisible by 16; tiles need whole 128s.
    return TILE if scaling == "block" else 16


class ScaledFloat8Linear(nn.Linear):
    """A drop-in nn.Linear whose three GEMMs run in fp8 at `scaling`; the bias is added in
    the output's precision.

    Its state dict is nn.Linear's (the statistics buffers are not persistent), so checkpoints
    move freely between fp8 and bf16 runs. Set `sample_error` for a step to record the
    forward GEMM's relative error against bf16's on that step's batch.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        scaling: Scaling,
        native: bool,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias)
        _check_features(in_features, out_features, scaling)
        self.scaling: Scaling = scaling
        self.native = native
        self.sample_error = False
        for name in STAT_NAMES:
            self.register_buffer(name, torch.zeros((), device=self.weight.device), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # The GEMM would read a bf16 input under autocast, so that is what gets quantized.
            x = x.to(torch.get_autocast_dtype(x.device.type))
        leading = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        y, amaxes = _ScaledFloat8Matmul.apply(
            flat, self.weight, self.get_buffer("grad_amax"), self.scaling, self.native
        )
        with torch.no_grad():
            self.get_buffer("input_amax").copy_(amaxes[0])
            self.get_buffer("weight_amax").copy_(amaxes[1])
            if self.sample_error:
                error = matmul_relative_error(y, flat, self.weight)
                self.get_buffer("matmul_rel_error").copy_(error)
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*leading, self.out_features)  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scaling={self.scaling}, native={self.native}"


def scaled_float8_supported(device: torch.device, scaling: Scaling) -> bool:
    """Row-scaled fp8 GEMMs run on fp8 tensor cores (compute capability 8.9+); the 1x128 and
    128x128 block-scaled ones are cuBLAS kernels for Hopper (9.x)."""
    if device.type != "cuda":
        return False
    capability = torch.cuda.get_device_capability(device)
    return capability >= (8, 9) if scaling == "row" else capability[0] == 9


def convert_to_scaled_float8(
    model: nn.Module,
    scaling: Scaling,
    *,
    native: bool,
    skip: tuple[str, ...] = ("lm_head",),
) -> int:
    """Swap every nn.Linear in `model` (except those named in `skip`; the tied head stays in
    bf16, as in fp8.convert_to_float8) for a ScaledFloat8Linear sharing its parameters;
    returns how many were swapped."""
    if scaling not in OPERAND_GRANULARITY:
        raise ValueError(f"fp8 scaling {scaling!r}: use one of {sorted(OPERAND_GRANULARITY)}")
    return swap_linears(
        model,
        lambda child, _: ScaledFloat8Linear(
            child.in_features,
            child.out_features,
            bias=child.bias is not None,
            scaling=scaling,
            native=native,
        ),
        skip=skip,
    )


def scaled_float8_layers(model: nn.Module) -> Iterator[tuple[str, ScaledFloat8Linear]]:
    for name, module in model.named_modules():
        if isinstance(module, ScaledFloat8Linear):
            yield name, module


def scaled_float8_stats(model: nn.Module, *, sampled: bool) -> dict[str, float]:
    """`fp8/<layer>/<stat>` for every ScaledFloat8Linear, read with one device-to-host copy;
    matmul_rel_error only when this step's batch was `sampled`."""
    layers = list(scaled_float8_layers(model))
    if not layers:
        return {}
    names = STAT_NAMES if sampled else STAT_NAMES[:-1]
    values = torch.stack([layer.get_buffer(stat) for _, layer in layers for stat in names])
    keys = [f"fp8/{name}/{stat}" for name, _ in layers for stat in names]
    stats = dict(zip(keys, values.tolist(), strict=True))
    if not any(v for k, v in stats.items() if k.endswith("/grad_amax")):
        # Never recorded (a compiled model): leave the series out rather than plot zeros.
        stats = {k: v for k, v in stats.items() if not k.endswith("/grad_amax")}
    return stats


def _check_features(in_features: int, out_features: int, scaling: Scaling) -> None:
    # Forward blocks in_features, dgrad out_features; _scaled_mm needs multiples of 16.
    multiple = TILE if scaling == "block" else 16
    if in_features % multiple or out_features % multiple:
        raise ValueError(
            f"fp8 scaling {scaling!r} needs Linear in/out features divisible by {multiple}; got "
            f"{in_features}x{out_features}: pick widths that are multiples of {multiple}"
        )
