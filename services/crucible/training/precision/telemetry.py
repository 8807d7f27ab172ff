"""How much each quantized GEMM operand loses at the ends of its format's range: the share of
values the format's max clipped, which would have rounded past it (saturation), and the share
of non-zero values that come back as zero (underflow), beside the operand's amax (logged every
few steps, its history). A trainer logs them to see a recipe going wrong before the loss does;
and, on sampled steps, how far each low-precision GEMM's output is from bf16's
(`matmul_relative_error`).

Each emulated layer keeps the shares of its last call in a buffer (row per operand, in OPERANDS
order; columns in STATS order), updated in place with no host sync; `numerics_stats` reads all
of them with one device-to-host copy, as fp8.float8_stats does.
"""

from typing import Protocol

import torch
from torch import Tensor, nn

OPERANDS = ("input", "weight", "grad_output", "weight_t", "grad_output_t", "input_t")
"""Forward: input @ weight.T. Dgrad: grad_output @ weight, with the weight quantized along
its output dimension (weight_t). Wgrad: grad_output_t @ input_t.T, both along the tokens."""
STATS = ("saturated", "underflow", "amax")
SHARES_BUFFER = "quantization_shares"
ERROR_BUFFER = "matmul_rel_error"


class Quantized(Protocol):
    @property
    def saturated(self) -> Tensor: ...

    def dequantize(self) -> Tensor: ...


def empty_shares(device: torch.device | None = None) -> Tensor:
    """The buffer a layer keeps: zeros until the operand is first quantized."""
    return torch.zeros(len(OPERANDS), len(STATS), device=device)


def operand_stats(x: Tensor, quantized: Quantized, values: Tensor) -> Tensor:
    """float32 (3,), in STATS order: the share of x's values the format's max clipped, the
    share that were non-zero and dequantize to zero, and x's largest magnitude. `values` are
    x's through the format, with or without a per-tensor scale (zero either way)."""
    underflow = (x != 0) & (values == 0)
    return torch.stack(
        [quantized.saturated.float().mean(), underflow.float().mean(), x.abs().amax().float()]
    )


def matmul_relative_error(y: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """float32 (): ||y - x @ w.T|| / ||x @ w.T||, the reference being bf16's GEMM of the
    unquantized operands, written in bf16 as a bf16 run's is: how far a low-precision GEMM's
    output is from what a bf16 run would have computed on the same batch."""
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        reference = (x.bfloat16() @ weight.bfloat16().t()).float()
        error: Tensor = (y.float() - reference).norm() / reference.norm().clamp(min=1e-30)
        return error


def numerics_stats(model: nn.Module, *, sampled: bool = False) -> dict[str, float]:
    """`numerics/<layer>/<operand>_<stat>` for every emulated layer, from its last call; with
    `sampled` (the last batch measured it), `numerics/<layer>/matmul_rel_error` too."""
    layers = [
        (name, buffers)
        for name, module in model.named_modules()
        if SHARES_BUFFER in (buffers := dict(module.named_buffers(recurse=False)))
    ]
    if not layers:
        return {}
    rows = [buffers[SHARES_BUFFER].flatten().float() for _, buffers in layers]
    keys = [
        f"numerics/{name}/{operand}_{stat}"
        for name, _ in layers
        for operand in OPERANDS
        for stat in STATS
    ]
    if sampled:
        rows += [buffers[ERROR_BUFFER].reshape(1).float() for _, buffers in layers]
        keys += [f"numerics/{name}/{ERROR_BUFFER}" for name, _ in layers]
    values = torch.cat(rows).tolist()
    return dict(zip(keys, values, strict=True))
