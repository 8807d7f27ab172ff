"""How much each quantized GEMM operand loses at the ends of its format's range: the share of
values clipped at the format's max (saturation) and the share of non-zero values that come back
as zero (underflow). A trainer logs them to see a recipe going wrong before the loss does.

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
STATS = ("saturated", "underflow")
SHARES_BUFFER = "quantization_shares"


class Quantized(Protocol):
    @property
    def saturated(self) -> Tensor: ...

    def dequantize(self) -> Tensor: ...


def empty_shares(device: torch.device | None = None) -> Tensor:
    """The buffer a layer keeps: zeros until the operand is first quantized."""
    return torch.zeros(len(OPERANDS), len(STATS), device=device)


def saturation_and_underflow(x: Tensor, quantized: Quantized, dequantized: Tensor) -> Tensor:
    """float32 (2,): the share of x's values clipped at the format max, and the share that
    were non-zero and dequantize to zero."""
    underflow = (x != 0) & (dequantized == 0)
    return torch.stack([quantized.saturated.float().mean(), underflow.float().mean()])


def numerics_stats(model: nn.Module) -> dict[str, float]:
    """`numerics/<layer>/<operand>_<stat>` for every emulated layer, from its last call."""
    layers = [
        (name, buffers[SHARES_BUFFER])
        for name, module in model.named_modules()
        if SHARES_BUFFER in (buffers := dict(module.named_buffers(recurse=False)))
    ]
    if not layers:
        return {}
    values = torch.stack([shares.flatten().float() for _, shares in layers]).flatten().tolist()
    keys = [
        f"numerics/{name}/{operand}_{stat}"
        for name, _ in layers
        for operand in OPERANDS
        for stat in STATS
    ]
    return dict(zip(keys, values, strict=True))
