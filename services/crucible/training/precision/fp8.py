"""FP8 training for the GPT's Linear layers: scaled fp8 matmuls with dynamic per-tensor scaling.

Each `Float8Linear` keeps its master weight in the parameter's dtype (float32 here, bf16
under a bf16 FSDP policy) and, on every call, scales input and weight into float8 e4m3 and
multiplies them with `torch._scaled_mm` (Hopper's fp8 tensor cores), accumulating in fp32
and writing bf16. The backward pass scales the incoming gradient into e5m2 (wider range,
fewer mantissa bits: gradients span more orders of magnitude than activations) and runs the
two gradient matmuls in fp8 too. Scales are dynamic: the amax of the tensor being cast,
taken right before the cast, so nothing can overflow and no history needs tuning.

The scaling math (`scale_from_amax`, `quantize`, `dequantize`) is plain tensor code that
runs anywhere; only `torch._scaled_mm` needs an fp8-capable GPU (compute capability 8.9+),
and `convert_to_float8` refuses other devices up front.
"""

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from crucible.training.precision.linear_swap import swap_linears
from crucible.training.precision.telemetry import matmul_relative_error

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
E4M3_MAX = float(torch.finfo(E4M3).max)
"""448: the largest finite e4m3fn value; forward tensors are scaled so their amax lands here."""
E5M2_MAX = float(torch.finfo(E5M2).max)
"""57344: the largest finite e5m2 value, for gradients."""
AMAX_FLOOR = 1e-12
"""An all-zero tensor has amax 0; flooring it keeps the scale finite."""

FP8_STAT_NAMES = ("input_amax", "input_scale", "weight_amax", "weight_scale", "grad_amax")
"""Per-layer statistics `float8_stats` reports; grad_amax is that of the previous backward."""
ERROR_STAT = "matmul_rel_error"
"""The forward GEMM's relative error against bf16's, on the steps that sample it."""


def scale_from_amax(amax: Tensor, fp8_max: float) -> Tensor:
    """The float32 factor that maps a tensor with this amax onto the fp8 range.

    No rounding to a power of two: _scaled_mm takes any float32 scale, and an exact one
    uses the whole range.
    """
    return fp8_max / amax.float().clamp(min=AMAX_FLOOR)


def quantize(x: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    """x * scale cast to `dtype`, saturating at the format's largest finite value.

    The cast itself would turn out-of-range values into NaN (e4m3fn has no infinity), so
    the clamp is what makes a stale or too-large scale safe.
    """
    fp8_max = float(torch.finfo(dtype).max)
    return (x.float() * scale).clamp(-fp8_max, fp8_max).to(dtype)


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    """The float32 values an fp8 tensor stands for."""
    return q.float() / scale


def _to_fp8(x: Tensor, amax: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(fp8 tensor, its scale) for x, whose amax is given."""
    scale = scale_from_amax(amax, float(torch.finfo(dtype).max))
    return quantize(x, scale, dtype), scale


def _scaled_mm(a: Tensor, b: Tensor, a_scale: Tensor, b_scale: Tensor) -> Tensor:
    """a @ b in fp8 with a bf16 result; a must be row-major, b column-major.

    _scaled_mm wants the inverse scales: the factors that turn fp8 values back into real ones.
    """
    return torch._scaled_mm(
        a, b, scale_a=a_scale.reciprocal(), scale_b=b_scale.reciprocal(), out_dtype=torch.bfloat16
    )


class _Float8Matmul(torch.autograd.Function):
    """y = x @ w.T with x, w and dy in fp8; the fp8 copies, not x and w, are saved."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: Tensor,
        weight: Tensor,
        x_amax: Tensor,
        w_amax: Tensor,
        grad_amax: Tensor,
    ) -> Tensor:
        x_fp8, x_scale = _to_fp8(x, x_amax, E4M3)
        w_fp8, w_scale = _to_fp8(weight, w_amax, E4M3)
        ctx.save_for_backward(x_fp8, x_scale, w_fp8, w_scale, grad_amax)
        ctx.input_dtype = x.dtype  # type: ignore[attr-defined]
        ctx.weight_dtype = weight.dtype  # type: ignore[attr-defined]
        return _scaled_mm(x_fp8, w_fp8.t(), x_scale, w_scale)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor, Tensor, None, None, None]:
        x_fp8, x_scale, w_fp8, w_scale, grad_amax = ctx.saved_tensors  # type: ignore[attr-defined]
        g_amax = grad_out.abs().max().float()
        g_fp8, g_scale = _to_fp8(grad_out, g_amax, E5M2)
        if not torch.compiler.is_compiling():
            # A statistic for the metrics only. Compiled graphs may not mutate a buffer in
            # the backward pass, so under torch.compile it is not recorded.
            grad_amax.copy_(g_amax)
        # dx = dy @ w: b must be w (out, in) laid out column-major.
        grad_x = _scaled_mm(g_fp8, w_fp8.t().contiguous().t(), g_scale, w_scale)
        # dw = dy.T @ x: a = dy.T made row-major, b = x made column-major.
        grad_w = _scaled_mm(g_fp8.t().contiguous(), x_fp8.t().contiguous().t(), g_scale, x_scale)
        return (
            grad_x.to(ctx.input_dtype),  # type: ignore[attr-defined]
            grad_w.to(ctx.weight_dtype),  # type: ignore[attr-defined]
            None,
            None,
            None,
        )


class Float8Linear(nn.Linear):
    """A drop-in nn.Linear whose matmul runs in fp8; the bias is added in bf16.

    Buffers hold the last step's amax and scale of input and weight and the last eager
    backward's gradient amax, for `float8_stats`; they are not part of the state dict, so a
    checkpoint of an fp8 run loads into a bf16 model and back. Set `sample_error` for a step
    to record the forward GEMM's relative error against bf16's on that step's batch.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.sample_error = False
        for name in (*FP8_STAT_NAMES, ERROR_STAT):
            self.register_buffer(name, torch.zeros((), device=self.weight.device), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # Under autocast an nn.Linear would see a bf16 input; reading bf16 halves the
            # bytes the amax and the cast read when x arrives in float32 (after LayerNorm).
            x = x.to(torch.get_autocast_dtype(x.device.type))
        leading = x.shape[:-1]
        flat = x.reshape(-1, x.size(-1))
        with torch.no_grad():
            input_amax = flat.abs().max().float()
            weight_amax = self.weight.abs().max().float()
            self.get_buffer("input_amax").copy_(input_amax)
            self.get_buffer("input_scale").copy_(scale_from_amax(input_amax, E4M3_MAX))
            self.get_buffer("weight_amax").copy_(weight_amax)
            self.get_buffer("weight_scale").copy_(scale_from_amax(weight_amax, E4M3_MAX))
        y = _Float8Matmul.apply(
            flat, self.weight, input_amax, weight_amax, self.get_buffer("grad_amax")
        )
        if self.sample_error:
            with torch.no_grad():
                error = matmul_relative_error(y, flat, self.weight)
                self.get_buffer(ERROR_STAT).copy_(error)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*leading, self.out_features)  # type: ignore[no-any-return]


def float8_supported(device: torch.device) -> bool:
    """fp8 tensor-core matmuls exist from compute capability 8.9 (Ada, Hopper) on."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def convert_to_float8(model: nn.Module, *, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Swap every nn.Linear in `model` (except those named in `skip`) for a Float8Linear
    sharing its parameters; returns how many were swapped.

    The tied output head stays bf16 by default: it is the embedding too, and its logits feed
    the softmax directly, where fp8's 3 mantissa bits cost the most.
    """
    weight = next(model.parameters())
    if not float8_supported(weight.device):
        where = (
            f"{torch.cuda.get_device_name(weight.device)} (compute capability "
            f"{'.'.join(map(str, torch.cuda.get_device_capability(weight.device)))})"
            if weight.device.type == "cuda"
            else f"device {weight.device}"
        )
        raise RuntimeError(
            f"precision 'fp8' needs a CUDA GPU with fp8 tensor cores (compute capability 8.9+, "
            f"e.g. H100/H200); the model is on {where}: use precision 'bf16' here"
        )

    def make(child: nn.Linear, _: int) -> nn.Linear:
        _check_shape(child)
        return Float8Linear(child.in_features, child.out_features, bias=child.bias is not None)

    return swap_linears(model, make, skip=skip)


def _check_shape(linear: nn.Linear) -> None:
    # _scaled_mm needs both matrix dimensions divisible by 16.
    if linear.in_features % 16 or linear.out_features % 16:
        raise ValueError(
            f"fp8 Linear needs in/out features divisible by 16; got {linear.in_features}x"
            f"{linear.out_features}: pick a width that is a multiple of 16"
        )


def float8_layers(model: nn.Module) -> Iterator[tuple[str, Float8Linear]]:
    for name, module in model.named_modules():
        if isinstance(module, Float8Linear):
            yield name, module


def float8_stats(model: nn.Module, *, sampled: bool = False) -> dict[str, float]:
    """`fp8/<layer>/<stat>` for every Float8Linear, read with one device-to-host copy; the
    matmul error too when the last batch was `sampled`."""
    layers = list(float8_layers(model))
    if not layers:
        return {}
    names = (*FP8_STAT_NAMES, ERROR_STAT) if sampled else FP8_STAT_NAMES
    values = torch.stack(
        [getattr(layer, stat).float() for _, layer in layers for stat in names]
    ).tolist()
    keys = [f"fp8/{name}/{stat}" for name, _ in layers for stat in names]
    stats = dict(zip(keys, values, strict=True))
    if not any(v for k, v in stats.items() if k.endswith("/grad_amax")):
        # Never recorded (a compiled model): leave the series out rather than plot zeros.
        stats = {k: v for k, v in stats.items() if not k.endswith("/grad_amax")}
    return stats
