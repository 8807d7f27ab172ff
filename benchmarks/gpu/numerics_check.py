"""The emulated block-scaled formats on a GPU (issue 28): the same bits on CUDA as on the CPU,
where the suite checks them against the scalar references, and what emulation costs a step.

    python3 benchmarks/gpu/numerics_check.py --out numerics_check.json

1. Bits: MXFP8 (e4m3 and e5m2 elements, floor and ceil scales) and NVFP4 (1x16 and 16x16
   blocks, round to nearest even, and stochastic rounding from counter_rng's draws, made on
   each device) of the same data quantized on the CPU and on the GPU, on normal,
   heavy-tailed (Student t, 2 degrees of freedom) and wide-range data with zeros; every
   element code, block scale, tensor scale and saturation flag compared.
2. GEMM: `block_scaled_gemm` of the same quantized operands on the GPU (bf16 tensor cores,
   float32 output) and on the CPU (float32), each against the float64 product of the
   operands' values: the largest error relative to the float64 sum of absolute products
   (float32 accumulation of n terms is bound by about n * 2**-24 of it).
3. Compiled roundings: every operand of each recipe rounded by the compiled quantizer
   (`OperandQuantizer(compiled=True)`, what a run with `compile` uses) and by the eager one,
   on the GPU: values, tensor scale and amax compared bit for bit, the shares within float32
   summation order.
4. Cost: a 124M GPT training step (bf16 autocast, AdamW, random tokens) with its Linear
   layers plain, emulated MXFP8 and emulated NVFP4, `--steps` timed steps after `--warmup`,
   alternated `--repeats` times, in each of `--modes`: "eager"; "roundings", the roundings
   compiled in an eager model (what the trainer runs with `compile`); "compiled", the whole
   model compiled. The median step of each, and the ratio to plain (eager plain for
   "roundings"). The warmup steps include the compiling.
"""

import argparse
import statistics
from typing import Any

import torch
from common import median_train_step_s, write_result

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.training.precision import counter_rng
from crucible.training.precision.emulated_linear import block_scaled_gemm, convert_to_emulated
from crucible.training.precision.mxfp8 import quantize_mxfp8
from crucible.training.precision.nvfp4 import quantize_nvfp4
from crucible.training.precision.recipes import (
    MXFP8Recipe,
    NVFP4Recipe,
    OperandQuantizer,
    QuantizedOperand,
)
from crucible.training.precision.telemetry import OPERANDS


def samples(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (256, 1024)
    normal = torch.randn(shape, generator=generator)
    t2 = torch.distributions.StudentT(2.0).sample(shape)
    wide = torch.randn(shape, generator=generator) * torch.exp2(
        torch.randint(-40, 40, shape, generator=generator).float()
    )
    wide[::7] = 0.0
    return {"normal": normal, "student_t2": t2, "wide_with_zeros": wide}


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point and a.element_size() == 1:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return bool(torch.equal(a.cpu(), b.cpu()))


def bits_check() -> list[dict[str, Any]]:
    rows = []
    for name, x in samples(0).items():
        for element in ("e4m3", "e5m2"):
            for rounding in ("floor", "ceil"):
                cpu = quantize_mxfp8(x, element=element, scale_rounding=rounding)  # type: ignore[arg-type]
                gpu = quantize_mxfp8(x.cuda(), element=element, scale_rounding=rounding)  # type: ignore[arg-type]
                fields = ("elements", "scale_bits", "saturated")
                equal = all(same(getattr(cpu, f), getattr(gpu, f)) for f in fields)
                rows.append({"format": f"mxfp8-{element}-{rounding}", "data": name, "equal": equal})
        for two_d in (False, True):
            cpu4 = quantize_nvfp4(x, two_d_blocks=two_d)
            gpu4 = quantize_nvfp4(x.cuda(), two_d_blocks=two_d)
            fields = ("codes", "block_scales", "tensor_scale", "saturated")
            equal = all(same(getattr(cpu4, f), getattr(gpu4, f)) for f in fields)
            blocks = "16x16" if two_d else "1x16"
            rows.append({"format": f"nvfp4-{blocks}", "data": name, "equal": equal})
        quantized = [
            quantize_nvfp4(data, stochastic=True, uniform=stochastic_draws(data))
            for data in (x, x.cuda())
        ]
        fields = ("codes", "block_scales", "tensor_scale", "saturated")
        equal = all(same(getattr(quantized[0], f), getattr(quantized[1], f)) for f in fields)
        rows.append({"format": "nvfp4-1x16-stochastic", "data": name, "equal": equal})
    return rows


def stochastic_draws(x: torch.Tensor) -> torch.Tensor:
    """counter_rng's draws for x, made on x's device from the same stream and counter."""
    key = counter_rng.stream_key(7, torch.tensor(3, dtype=torch.int64, device=x.device))
    return counter_rng.uniform(x.shape, key)


def gemm_check() -> list[dict[str, Any]]:
    rows = []
    counter = torch.tensor(1, dtype=torch.int64)
    weights = samples(2)
    for name, x in samples(1).items():
        for fmt, quantize in (
            ("mxfp8", OperandQuantizer(MXFP8Recipe())),
            ("nvfp4", OperandQuantizer(NVFP4Recipe(stochastic_rounding=False))),
        ):
            a, b = quantize("input", x, counter), quantize("weight", weights[name][:128], counter)
            a64, b64 = a.values.double(), b.values.double()
            scale = 1.0
            if a.tensor_scale is not None and b.tensor_scale is not None:
                scale = float(a.tensor_scale.double() * b.tensor_scale.double())
            exact = (a64 @ b64.t()) * scale
            bound = ((a64.abs() @ b64.abs().t()) * scale).clamp(min=1e-300)
            for device, product in (
                ("cpu", block_scaled_gemm(a, b)),
                ("cuda", block_scaled_gemm(on_cuda(a), on_cuda(b)).cpu()),
            ):
                worst = ((product.double() - exact).abs() / bound).max().item()
                rows.append(
                    {
                        "format": fmt,
                        "data": name,
                        "device": device,
                        "worst_error_of_abs_sum": worst,
                        "float32_bound": x.shape[1] * 2.0**-24,
                    }
                )
    return rows


def compiled_bits_check() -> list[dict[str, Any]]:
    rows = []
    recipes = {
        "mxfp8": MXFP8Recipe(),
        "mxfp8-floor-e5m2": MXFP8Recipe(scale_rounding="floor", grad_element="e5m2"),
        "nvfp4": NVFP4Recipe(),
        "nvfp4-nearest-1x16": NVFP4Recipe(
            stochastic_rounding=False, hadamard=False, weight_2d_blocks=False
        ),
    }
    counter = torch.tensor(3, dtype=torch.int64, device="cuda")
    for name, recipe in recipes.items():
        eager = OperandQuantizer(recipe, layer_seed=5)
        compiled = OperandQuantizer(recipe, layer_seed=5, compiled=True)
        for data, x in samples(3).items():
            for operand in OPERANDS:
                a, b = eager(operand, x.cuda(), counter), compiled(operand, x.cuda(), counter)
                scales_equal = (a.tensor_scale is None and b.tensor_scale is None) or same(
                    a.tensor_scale, b.tensor_scale
                )
                rows.append(
                    {
                        "recipe": name,
                        "data": data,
                        "operand": operand,
                        "equal": same(a.values, b.values)
                        and scales_equal
                        and same(a.stats[2], b.stats[2]),
                        "shares_close": bool(torch.allclose(a.stats[:2], b.stats[:2])),
                    }
                )
    return rows


def on_cuda(operand: QuantizedOperand) -> QuantizedOperand:
    return QuantizedOperand(*(t.cuda() if t is not None else None for t in operand))


def timed_steps(fmt: str | None, mode: str, steps: int, warmup: int, batch: int) -> float:
    torch.manual_seed(0)
    model = build_model(model_preset("124M"), device="cuda")
    if fmt is not None:
        convert_to_emulated(model, fmt, compiled=mode == "roundings")  # type: ignore[arg-type]
    return median_train_step_s(
        model, batch=batch, steps=steps, warmup=warmup, compiled=mode == "compiled"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", default="numerics_check.json")
    parser.add_argument(
        "--modes",
        default="eager,roundings",
        help="comma-separated, of eager, roundings and compiled (see the docstring)",
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = set(modes) - {"eager", "roundings", "compiled"}
    if unknown:
        parser.error(f"--modes {args.modes!r}: unknown {sorted(unknown)}")

    bits = bits_check()
    print("bits equal on CPU and CUDA:", all(r["equal"] for r in bits), flush=True)
    gemms = gemm_check()
    for row in gemms:
        print(row, flush=True)
    compiled_bits = compiled_bits_check()
    print(
        "compiled roundings equal to eager:",
        all(r["equal"] for r in compiled_bits),
        "shares close:",
        all(r["shares_close"] for r in compiled_bits),
        flush=True,
    )
    # Plain layers have no roundings to compile: "roundings" compares with the eager step.
    step_s: dict[str, list[float]] = {plain(mode): [] for mode in modes}
    step_s |= {f"{fmt}-{mode}": [] for mode in modes for fmt in ("mxfp8", "nvfp4")}
    for _ in range(args.repeats):
        for name in step_s:
            fmt, mode = name.split("-")
            seconds = timed_steps(
                None if fmt == "bf16" else fmt, mode, args.steps, args.warmup, args.batch
            )
            step_s[name].append(seconds)
            print(name, round(seconds * 1000, 2), "ms", flush=True)
    # --repeats 0 checks the bits and the GEMMs alone.
    medians = {k: statistics.median(v) for k, v in step_s.items() if v}
    write_result(
        args.out,
        {
            "name": "numerics_check",
            "config": vars(args),
            "bits": bits,
            "all_bits_equal": all(r["equal"] for r in bits),
            "gemm": gemms,
            "compiled_bits": compiled_bits,
            "all_compiled_bits_equal": all(r["equal"] for r in compiled_bits),
            "step_s": step_s,
            "median_step_s": medians,
            "emulation_slowdown": {
                f"{fmt}-{mode}": round(medians[f"{fmt}-{mode}"] / medians[plain(mode)], 2)
                for mode in modes
                for fmt in ("mxfp8", "nvfp4")
                if medians
            },
        },
    )


def plain(mode: str) -> str:
    return "bf16-eager" if mode == "roundings" else f"bf16-{mode}"


if __name__ == "__main__":
    main()
