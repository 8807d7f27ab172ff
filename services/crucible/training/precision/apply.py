"""A train run's `precision`, applied to its model: which Linear layers are swapped for what,
which numerics statistics are logged, and what of it a checkpoint must keep.

"bf16" changes no layer. "fp8" runs scaled float8 matmuls on the GPU's fp8 tensor cores:
one scale per tensor (`fp8.py`), or per row or 1x128 tile and 128x128 block
(`fp8_scaled.py`, `fp8_scaling`). "mxfp8" and "nvfp4" are block-scaled formats that only
Blackwell GPUs multiply natively; here they are emulated (`numerics/`): each GEMM operand is
rounded through the format and back and the matmul runs in float32, which gives the format's
numerics at none of its speed. Row- and block-scaled fp8 can be emulated so too off Hopper. A
run has to say it wants that (`emulate_precision`), so that nobody reads an emulated run's
tokens/s as the format's.
"""

from typing import Any

import torch
from torch import nn

from crucible.config.workload import TrainConfig
from crucible.domain.metric_keys import (
    NUMERICS_MATMUL_ERROR_MAX,
    NUMERICS_SATURATED_MAX,
    NUMERICS_UNDERFLOW_MAX,
)
from crucible.training.precision.emulated_linear import (
    convert_to_emulated,
    load_rounding_states,
    rounding_states,
)
from crucible.training.precision.fp8 import convert_to_float8, float8_stats
from crucible.training.precision.fp8_scaled import (
    convert_to_scaled_float8,
    scaled_float8_stats,
    scaled_float8_supported,
)
from crucible.training.precision.recipes import MXFP8Recipe, NVFP4Recipe, Recipe
from crucible.training.precision.telemetry import numerics_stats

EMULATED = ("mxfp8", "nvfp4")


def check_precision(config: TrainConfig, device: torch.device) -> None:
    """Refuse, naming the device and the format, a precision this device cannot run as asked."""
    if config.emulate_precision:
        return
    if config.precision in EMULATED:
        raise ValueError(
            f"precision {config.precision!r} has no native kernels on {_device_name(device)} "
            "in this build (its block-scaled matmuls need a Blackwell GPU); set "
            "train.emulate_precision: true to run it emulated (the format's numerics, not "
            "its speed)"
        )
    if _fine_scaled_fp8(config) and not scaled_float8_supported(device, config.fp8_scaling):  # type: ignore[arg-type]
        needs = "a Hopper GPU" if config.fp8_scaling == "block" else "fp8 tensor cores"
        raise ValueError(
            f"precision 'fp8' with fp8_scaling {config.fp8_scaling!r} has no native kernels on "
            f"{_device_name(device)} (they need {needs}); set train.emulate_precision: true "
            "to run it emulated (the recipe's numerics, not its speed)"
        )


def apply_precision(config: TrainConfig, model: nn.Module, device: torch.device) -> None:
    """Swap the model's Linear layers for the precision's (the tied head stays as it is)."""
    check_precision(config, device)
    if _fine_scaled_fp8(config):
        native = scaled_float8_supported(device, config.fp8_scaling)  # type: ignore[arg-type]
        convert_to_scaled_float8(model, config.fp8_scaling, native=native)  # type: ignore[arg-type]
    elif config.precision == "fp8":
        convert_to_float8(model)
    elif config.precision in EMULATED:
        convert_to_emulated(
            model,
            config.precision,  # type: ignore[arg-type]
            emulated_recipe(config),
            compiled=config.compile,
        )


def compiles_whole_model(config: TrainConfig) -> bool:
    """Whether `compile` compiles the model (its step, or its blocks under FSDP). An emulated
    precision compiles its roundings instead (`apply_precision`) and runs the model eager:
    a whole step with six roundings a layer inlined is a graph that grows with the depth and
    is slow to compile (docs/numerics.md)."""
    return config.compile and config.precision not in EMULATED


def emulated_recipe(config: TrainConfig) -> Recipe:
    if config.precision == "mxfp8":
        return MXFP8Recipe(scale_rounding=config.mxfp8_scale_rounding)
    return NVFP4Recipe(
        stochastic_rounding=config.nvfp4_stochastic_rounding,
        hadamard=config.nvfp4_hadamard,
        seed=config.seed,
    )


def _fine_scaled_fp8(config: TrainConfig) -> bool:
    return config.precision == "fp8" and config.fp8_scaling != "tensor"


def sample_matmul_error(model: nn.Module, on: bool) -> None:
    """Have every low-precision layer measure its GEMM against bf16's on the next batches
    (until turned off): the trainer turns it on for the steps that log statistics."""
    for module in model.modules():
        if hasattr(module, "sample_error"):
            setattr(module, "sample_error", on)  # noqa: B010 - any of three layer classes


def precision_stats(config: TrainConfig, model: nn.Module, *, sampled: bool) -> dict[str, float]:
    """fp8: each layer's amax (and per-tensor scale); mxfp8 and nvfp4: each operand's amax
    and share of values that saturate at the format's largest value and that flush to zero;
    with `sampled`, each layer's forward GEMM error against bf16 too."""
    if config.precision == "fp8":
        if _fine_scaled_fp8(config):
            stats = scaled_float8_stats(model, sampled=sampled)
        else:
            stats = float8_stats(model, sampled=sampled)
        return stats | worst_error(stats)
    if config.precision in EMULATED:
        stats = numerics_stats(model, sampled=sampled)
        return stats | worst_shares(stats) | worst_error(stats)
    return {}


def worst_error(stats: dict[str, float]) -> dict[str, float]:
    """The largest GEMM relative error over the layers: one series a run."""
    errors = [v for k, v in stats.items() if k.endswith("/matmul_rel_error")]
    return {NUMERICS_MATMUL_ERROR_MAX: max(errors)} if errors else {}


def worst_shares(stats: dict[str, float]) -> dict[str, float]:
    """The largest saturated and underflow shares over the layers and operands: what the
    chart's CrucibleRunNumericsSaturating alert watches, one series a run."""
    saturated = [v for k, v in stats.items() if k.endswith("_saturated")]
    underflow = [v for k, v in stats.items() if k.endswith("_underflow")]
    if not saturated:
        return {}
    return {NUMERICS_SATURATED_MAX: max(saturated), NUMERICS_UNDERFLOW_MAX: max(underflow)}


def precision_state(config: TrainConfig, model: nn.Module) -> dict[str, Any]:
    """What a checkpoint keeps of the precision: each emulated layer's rounding counter."""
    return {"rounding": rounding_states(model)} if config.precision in EMULATED else {}


def load_precision_state(model: nn.Module, state: dict[str, Any]) -> None:
    if state.get("rounding"):
        load_rounding_states(model, state["rounding"])


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return f"{torch.cuda.get_device_name(device)} (compute capability {capability})"
    return f"the {device.type.upper()}"
