"""Linear layers whose GEMMs see MXFP8 or NVFP4 numerics, emulated: every operand is rounded
through the format and back, and each GEMM computes what a block-scaled kernel computes from
the rounded operands: the elements times their block scales, multiplied with float32
accumulation, then NVFP4's two tensor scales applied to the product (`block_scaled_gemm`).

This is for studying a recipe's numerics on any device, CPU included, not for speed: the
rounding matches the formats bit for bit (tests/workloads/numerics check it against the
scalar references), while a real block-scaled kernel would differ only in its float32
accumulation order. Which operand is rounded how is recipes.py's business; the saturation and
underflow of each is kept for telemetry.numerics_stats.
"""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from crucible.training.precision.linear_swap import swap_linears
from crucible.training.precision.recipes import (
    MXFP8Recipe,
    NVFP4Recipe,
    OperandQuantizer,
    QuantizedOperand,
    Recipe,
)
from crucible.training.precision.telemetry import (
    ERROR_BUFFER,
    OPERANDS,
    SHARES_BUFFER,
    empty_shares,
    matmul_relative_error,
)

Format = Literal["mxfp8", "nvfp4"]
COUNTER_BUFFER = "rounding_counter"
RECIPES: dict[str, type[MXFP8Recipe] | type[NVFP4Recipe]] = {
    "mxfp8": MXFP8Recipe,
    "nvfp4": NVFP4Recipe,
}


class _EmulatedMatmul(torch.autograd.Function):
    """y = x @ w.T with every GEMM operand rounded through the recipe's format.

    x and w are saved in their own precision and quantized again, along the other dimension,
    in the backward pass.
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: Tensor,
        weight: Tensor,
        shares: Tensor,
        counter: Tensor,
        quantize: OperandQuantizer,
    ) -> Tensor:
        x_q = quantize("input", x, counter)
        w_q = quantize("weight", weight, counter)
        y = block_scaled_gemm(x_q, w_q)
        _record(shares, ("input", x_q.stats), ("weight", w_q.stats))
        ctx.save_for_backward(x, weight, shares, counter)
        ctx.quantize = quantize  # type: ignore[attr-defined]
        return y.to(x.dtype)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor, Tensor, None, None, None]:
        x, weight, shares, counter = ctx.saved_tensors  # type: ignore[attr-defined]
        quantize: OperandQuantizer = ctx.quantize  # type: ignore[attr-defined]
        g_q = quantize("grad_output", grad_out, counter)
        wt_q = quantize("weight_t", weight.t(), counter)
        # wgrad reduces over the tokens, so its operands are quantized along them; a token
        # count that is not a multiple of the block is padded with zeros, which change no
        # block's amax and add nothing to the product.
        block = quantize.recipe.block_size
        pad = -x.shape[0] % block
        gt_q = quantize("grad_output_t", F.pad(grad_out.t(), (0, pad)), counter)
        xt_q = quantize("input_t", F.pad(x.t(), (0, pad)), counter)
        grad_x = block_scaled_gemm(g_q, wt_q)
        grad_w = block_scaled_gemm(gt_q, xt_q)
        _record(
            shares,
            ("grad_output", g_q.stats),
            ("weight_t", wt_q.stats),
            ("grad_output_t", gt_q.stats),
            ("input_t", xt_q.stats),
        )
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), None, None, None


def block_scaled_gemm(a: QuantizedOperand, b: QuantizedOperand) -> Tensor:
    """float32 a @ b.T as a block-scaled kernel computes it: the operands' values multiplied
    with float32 accumulation, then both tensor scales (NVFP4's; MXFP8 has none) applied to
    the product, as the kernels' epilogue applies them.

    The values are exact in bf16 (recipes.QuantizedOperand), so on a GPU they multiply on
    bf16 tensor cores into a float32 output: the sums a float32 GEMM would form, up to their
    order, at tensor-core speed instead of float32's. The CPU multiplies them in float32.
    """
    # Autocast would hand the GEMM bf16 and round its output before the tensor scales.
    with torch.autocast(a.values.device.type, enabled=False):
        if a.values.is_cuda:
            product = torch.mm(
                a.values.bfloat16(), b.values.bfloat16().t(), out_dtype=torch.float32
            )
        else:
            product = a.values @ b.values.t()
    if a.tensor_scale is not None and b.tensor_scale is not None:
        product = product * (a.tensor_scale * b.tensor_scale)
    return product


def _record(shares: Tensor, *rows: tuple[str, Tensor]) -> None:
    if torch.compiler.is_compiling():
        # Compiled graphs may not mutate a buffer in the backward pass; telemetry is eager-only.
        return
    with torch.no_grad():
        for operand, values in rows:
            shares[OPERANDS.index(operand)].copy_(values)


class EmulatedLinear(nn.Linear):
    """A drop-in nn.Linear whose GEMMs see the recipe's numerics; the bias is added unrounded.

    Its state dict is nn.Linear's (the telemetry buffers are not persistent), so checkpoints
    move freely between emulated and plain runs. Set `sample_error` for a step to record the
    forward GEMM's relative error against bf16's on that step's batch.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        recipe: Recipe,
        layer_seed: int = 0,
        compiled: bool = False,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias)
        _check_features(in_features, out_features, recipe)
        self.recipe = recipe
        self.quantize = OperandQuantizer(recipe, layer_seed=layer_seed, compiled=compiled)
        self.sample_error = False
        self.register_buffer(SHARES_BUFFER, empty_shares(self.weight.device), persistent=False)
        self.register_buffer(
            ERROR_BUFFER, torch.zeros((), device=self.weight.device), persistent=False
        )
        # Which draws of its stochastic-rounding streams the last call took: one step on per
        # call, so a resumed run that sets it back rounds on as the run that saved it.
        self.register_buffer(
            COUNTER_BUFFER,
            torch.zeros((), dtype=torch.int64, device=self.weight.device),
            persistent=False,
        )

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # The GEMM would read a bf16 input under autocast, so that is what gets rounded.
            x = x.to(torch.get_autocast_dtype(x.device.type))
        leading = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        # Counted before the call: compiled graphs may hand the backward the buffer itself
        # rather than a copy, so nothing may change it between this call and its backward.
        counter = self.get_buffer(COUNTER_BUFFER).add_(1)
        y = _EmulatedMatmul.apply(
            flat, self.weight, self.get_buffer(SHARES_BUFFER), counter.clone(), self.quantize
        )
        if self.sample_error:
            with torch.no_grad():
                error = matmul_relative_error(y, flat, self.weight)
                self.get_buffer(ERROR_BUFFER).copy_(error)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*leading, self.out_features)  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe}"


def convert_to_emulated(
    model: nn.Module,
    fmt: Format,
    options: Recipe | None = None,
    *,
    skip: tuple[str, ...] = ("lm_head",),
    compiled: bool = False,
) -> int:
    """Swap every nn.Linear in `model` (except those named in `skip`) for an EmulatedLinear
    sharing its parameters; returns how many were swapped.

    `options` defaults to the format's recipe (MXFP8Recipe() or NVFP4Recipe()). The tied output
    head stays in full precision by default, as with fp8.convert_to_float8: it is also the
    embedding, and its logits feed the softmax directly. Every layer gets its own
    stochastic-rounding stream, numbered in module order. With `compiled`, the roundings run
    compiled (OperandQuantizer) in the otherwise eager layers.
    """
    if fmt not in RECIPES:
        raise ValueError(f"numerics format {fmt!r}: use one of {sorted(RECIPES)}")
    recipe = options if options is not None else RECIPES[fmt]()
    if not isinstance(recipe, RECIPES[fmt]):
        raise TypeError(
            f"format {fmt!r} takes a {RECIPES[fmt].__name__}; got {type(recipe).__name__}"
        )
    return swap_linears(
        model,
        lambda child, number: EmulatedLinear(
            child.in_features,
            child.out_features,
            bias=child.bias is not None,
            recipe=recipe,
            layer_seed=number,
            compiled=compiled,
        ),
        skip=skip,
    )


def rounding_states(model: nn.Module) -> dict[str, int]:
    """Every EmulatedLinear's stochastic-rounding counter, by module name (the trainer's
    checkpoint keeps them beside the other RNGs)."""
    return {
        name: int(module.get_buffer(COUNTER_BUFFER))
        for name, module in model.named_modules()
        if isinstance(module, EmulatedLinear)
    }


def load_rounding_states(model: nn.Module, states: dict[str, int]) -> None:
    modules = dict(model.named_modules())
    for name, state in states.items():
        module = modules.get(name)
        if not isinstance(module, EmulatedLinear):
            raise ValueError(f"the checkpoint's rounding state names {name!r}, no emulated layer")
        if not isinstance(state, int):
            raise ValueError(
                f"the checkpoint's rounding state of {name!r} is a generator's, from a build "
                "before counter-based rounding: resume it with that build, or start afresh"
            )
        module.get_buffer(COUNTER_BUFFER).fill_(state)


def _check_features(in_features: int, out_features: int, recipe: Recipe) -> None:
    # The forward GEMM blocks in_features, dgrad out_features.
    block = recipe.block_size
    if in_features % block or out_features % block:
        fmt = "mxfp8" if isinstance(recipe, MXFP8Recipe) else "nvfp4"
        raise ValueError(
            f"{fmt} Linear needs in/out features divisible by {block}; got "
            f"{in_features}x{out_features}: pick widths that are multiples of {block}"
        )
