"""Which operand of a Linear layer's three GEMMs is quantized how, for each emulated format.

A Linear layer runs three GEMMs: forward y = x @ w.T (reducing over in_features), dgrad
dx = dy @ w (over out_features) and wgrad dw = dy.T @ x (over tokens). Block scales run along
the dimension a GEMM reduces over, so each GEMM gets its own quantized copy of its operands,
as Transformer Engine makes "rowwise" and "columnwise" copies; here they are made in the
backward pass from the saved high-precision x and w, which gives the same values as saving
the copies.

MXFP8 (TE's MXFP8BlockScaling): every operand in 1x32 blocks, E4M3 by default for all of
them (TE: the fine-grained scales leave no need for E5M2's range), round-to-nearest-even.

NVFP4 (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149; TE's
NVFP4BlockScaling and its reference quantizer factory):
- weights in 16x16 2-D blocks, so forward and dgrad see the same quantized weight;
- inputs and gradients in 1x16 blocks;
- the random Hadamard transform on both wgrad operands (along the tokens), nowhere else;
- stochastic rounding on the gradient (dgrad and wgrad), round-to-nearest-even elsewhere.
The paper also keeps some layers (mostly the last ones) in high precision; which ones is
`convert_to_emulated`'s skip list.
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from crucible.training.precision import counter_rng, mxfp8, nvfp4
from crucible.training.precision.compiled_rounding import compiled_rounding
from crucible.training.precision.hadamard import apply_hadamard, random_hadamard
from crucible.training.precision.telemetry import operand_stats


@dataclass(frozen=True)
class MXFP8Recipe:
    scale_rounding: mxfp8.ScaleRounding = "ceil"
    """"ceil" as NVIDIA trains (no block saturates); "floor" is the OCP spec's algorithm.
    See mxfp8.py for why the default is not the spec's."""
    element: mxfp8.Element = "e4m3"
    """Element format of the input and weight."""
    grad_element: mxfp8.Element = "e4m3"
    """Element format of the gradient; "e5m2" is TE's HYBRID."""

    @property
    def block_size(self) -> int:
        return mxfp8.BLOCK_SIZE


@dataclass(frozen=True)
class NVFP4Recipe:
    stochastic_rounding: bool = True
    """Round the gradient stochastically (unbiased), everything else to nearest even."""
    hadamard: bool = True
    """Apply the random Hadamard transform to both operands of the wgrad GEMM."""
    weight_2d_blocks: bool = True
    """Scale the weight per 16x16 tile rather than per 1x16 row segment."""
    seed: int = 0
    """Seeds the Hadamard signs (shared by all layers) and each layer's rounding draws."""

    @property
    def block_size(self) -> int:
        return nvfp4.BLOCK_SIZE


Recipe = MXFP8Recipe | NVFP4Recipe


class QuantizedOperand(NamedTuple):
    """A GEMM operand rounded through its format, as a block-scaled kernel reads it."""

    values: Tensor
    """float32: each element times its block scale. Exact, and exact in bf16 as well for
    every magnitude of 2**-126 or more (MXFP8's elements have at most 4 significant bits
    and its scales are powers of two; NVFP4Tensor.block_values says why for NVFP4)."""
    tensor_scale: Tensor | None
    """NVFP4's float32 per-tensor scale, which the GEMM applies to its output; None for
    MXFP8, which has none."""
    stats: Tensor
    """telemetry.STATS of the operand: its saturated and underflow shares and its amax."""


GRADIENT_OPERANDS = ("grad_output", "grad_output_t")
WGRAD_OPERANDS = ("grad_output_t", "input_t")


class OperandQuantizer:
    """Rounds one layer's GEMM operands through its recipe's format and back to float32.

    With `compiled`, the rounding runs as torch.compile'd graphs (dynamic shapes, a few per
    format, shared by every layer) inside an eager model. Compiling the model's whole step
    instead inlines six roundings per layer into one graph, which grows with the depth and
    takes Inductor long to compile; eager, each rounding is dozens of kernels over the
    operand, the stochastic draws' integer hash most of them.
    """

    def __init__(self, recipe: Recipe, *, layer_seed: int = 0, compiled: bool = False) -> None:
        self.recipe = recipe
        # One stream per layer and operand: layers sharing a stream would make each layer's
        # rounding depend on how many layers ran before it.
        recipe_seed = recipe.seed if isinstance(recipe, NVFP4Recipe) else 0
        self._rounding_seed = recipe_seed * 1_000_003 + layer_seed
        rotates = isinstance(recipe, NVFP4Recipe) and recipe.hadamard
        self._hadamard = random_hadamard(recipe_seed) if rotates else None
        self._round_mxfp8 = compiled_rounding(round_mxfp8) if compiled else round_mxfp8
        self._round_nvfp4 = compiled_rounding(round_nvfp4) if compiled else round_nvfp4

    def __call__(self, operand: str, t: Tensor, counter: Tensor) -> QuantizedOperand:
        """t through the format and back, with its telemetry.STATS.

        `t` is laid out with the GEMM's reduction dimension last. The wgrad operands come back
        Hadamard-transformed when the recipe says so; the transform cancels in their product.
        Stochastic rounding draws number `counter` (an int64 tensor) of this layer's stream
        for the operand (counter_rng.py).
        """
        # Plain, contiguous float32 with autocast off: what a compiled rounding takes without
        # compiling again (compiled_rounding.py).
        t = t.detach().float().contiguous()
        with torch.autocast(t.device.type, enabled=False):
            return self._round(operand, t, counter)

    def _round(self, operand: str, t: Tensor, counter: Tensor) -> QuantizedOperand:
        if isinstance(self.recipe, MXFP8Recipe):
            element = (
                self.recipe.grad_element if operand in GRADIENT_OPERANDS else self.recipe.element
            )
            return self._round_mxfp8(t, element, self.recipe.scale_rounding)
        if operand in WGRAD_OPERANDS and self._hadamard is not None:
            # Eager, outside the compiled rounding: a 16-wide matmul whose sums Inductor
            # could order differently from the eager kernel's.
            t = apply_hadamard(t, self._hadamard)
        stochastic = self.recipe.stochastic_rounding and operand in GRADIENT_OPERANDS
        two_d = self.recipe.weight_2d_blocks and operand in ("weight", "weight_t")
        counter = counter.to(t.device)
        stream = self._stream(operand, counter) if stochastic else None
        return self._round_nvfp4(t, two_d, stream, counter)

    def _stream(self, operand: str, counter: Tensor) -> Tensor:
        # A tensor, not an int: a compiled rounding would specialise on an int and compile
        # again for every layer.
        number = self._rounding_seed * len(GRADIENT_OPERANDS) + GRADIENT_OPERANDS.index(operand)
        return torch.full_like(counter, number)


def round_mxfp8(
    t: Tensor, element: mxfp8.Element, scale_rounding: mxfp8.ScaleRounding
) -> QuantizedOperand:
    quantized = mxfp8.quantize_mxfp8(t, element=element, scale_rounding=scale_rounding)
    values = quantized.dequantize()
    return QuantizedOperand(values, None, operand_stats(t, quantized, values))


def round_nvfp4(
    t: Tensor, two_d_blocks: bool, stream: Tensor | None, counter: Tensor
) -> QuantizedOperand:
    """Rounded stochastically, from draw `counter` of `stream`, where a stream is given."""
    uniform = None
    if stream is not None:
        uniform = counter_rng.uniform(t.shape, counter_rng.stream_key(stream, counter))
    quantized = nvfp4.quantize_nvfp4(
        t, stochastic=stream is not None, uniform=uniform, two_d_blocks=two_d_blocks
    )
    values = quantized.block_values()
    return QuantizedOperand(values, quantized.tensor_scale, operand_stats(t, quantized, values))
