"""Row- and block-scaled fp8 (issue 28) on a Hopper GPU: the real kernels against a float64
reference, and what each scaling costs a training step.

    python3 benchmarks/gpu/fp8_scaling_check.py --out fp8_scaling_check.json

1. Bits: every granularity's quantizer (tensor, row, 1x128 tile, 128x128 block) gives the
   same codes and scales on CUDA as on the CPU, where the suite holds it to the scalar
   reference.
2. GEMMs: `torch._scaled_mm` on each supported pair of scalings against the float64 product
   of the same dequantized operands, at each of `--gemm-shapes`. The bound per element is
   bf16's rounding of the result plus float32 accumulation over K (as the CPU test's):
   `worst_bound_ratio` <= 1 passes.
   The float64 reference is also compared with bf16's GEMM of the unquantized operands, the
   error a bf16 run would see, for scale.
3. A layer: ScaledFloat8Linear native against emulated on the GPU (forward, dgrad and wgrad
   relative differences: accumulation order only, both round the same operands).
4. Steps: the built-in GPT (`--preset`, default 1.3B), bf16 autocast, compiled, fused AdamW,
   random tokens, at bf16 and fp8 with tensor, row and block scaling; `--steps` timed steps
   after `--warmup`, the configurations alternated `--repeats` times (one TorchInductor cache,
   so repeats recompile from it). Median step and tokens/s per configuration.
"""

import argparse
import statistics
from typing import Any

import torch
from common import median_train_step_s, write_result

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.training.precision.fp8 import convert_to_float8
from crucible.training.precision.fp8_scaled import ScaledFloat8Linear, convert_to_scaled_float8
from crucible.training.precision.fp8_scaling import quantize
from crucible.training.precision.scaled_matmul import SUPPORTED, scaled_matmul


def wide(shape: tuple[int, int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows = torch.exp2(torch.randint(-12, 6, (shape[0], 1), generator=g).float())
    return torch.randn(shape, generator=g) * rows


def bits_check() -> list[dict[str, Any]]:
    rows = []
    x = wide((512, 1024), 0)
    for granularity in ("tensor", "row", "tile", "block"):
        cpu = quantize(x, granularity)  # type: ignore[arg-type]
        gpu = quantize(x.cuda(), granularity)  # type: ignore[arg-type]
        equal = torch.equal(cpu.data.view(torch.uint8), gpu.data.view(torch.uint8).cpu())
        equal = equal and torch.equal(cpu.scale, gpu.scale.cpu())
        rows.append({"granularity": granularity, "equal": bool(equal)})
    return rows


def gemm_check(m: int, k: int, n: int) -> list[dict[str, Any]]:
    rows = []
    a_raw, b_raw = wide((m, k), 1).cuda(), wide((n, k), 2).cuda() / 3
    bf16 = (a_raw.bfloat16() @ b_raw.bfloat16().t()).double()
    for pair in sorted(SUPPORTED):
        a, b = quantize(a_raw, pair[0]), quantize(b_raw, pair[1])
        out = scaled_matmul(a, b, native=True).double()
        a64, b64 = a.dequantize().double(), b.dequantize().double()
        exact = a64 @ b64.t()
        accumulation = k * 2.0**-24 * (a64.abs() @ b64.abs().t())
        bound = exact.abs() * 2.0**-8 + accumulation * (1 + 2.0**-8)
        error = (out - exact).abs()
        emulated = scaled_matmul(a, b, native=False)
        rows.append(
            {
                "pair": "x".join(pair),
                "shape": [m, k, n],
                "worst_bound_ratio": float((error / bound.clamp(min=1e-300)).max()),
                "rel_error_vs_float64": float((out - exact).norm() / exact.norm()),
                "quantized_vs_bf16_gemm": float((exact - bf16).norm() / bf16.norm()),
                "emulated_bitwise_equal_share": float((emulated.double() == out).float().mean()),
            }
        )
        print(rows[-1], flush=True)
    return rows


def layer_check(scaling: str) -> dict[str, float]:
    torch.manual_seed(0)
    native = ScaledFloat8Linear(2048, 1024, scaling=scaling, native=True).cuda()  # type: ignore[arg-type]
    emulated = ScaledFloat8Linear(2048, 1024, scaling=scaling, native=False).cuda()  # type: ignore[arg-type]
    emulated.load_state_dict(native.state_dict())
    x = torch.randn(1000, 2048, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
    results = {}
    outputs = []
    for layer in (native, emulated):
        xi = x.clone().requires_grad_()
        y = layer(xi)
        y.backward(dy)
        outputs.append((y.float(), xi.grad.float(), layer.weight.grad.float()))  # type: ignore[union-attr]
    for name, a, b in zip(("forward", "dgrad", "wgrad"), *outputs, strict=True):
        results[name] = float((a - b).norm() / b.norm())
    return results


def timed(precision: str, args: argparse.Namespace) -> float:
    torch.manual_seed(0)
    model = build_model(model_preset(args.preset), device="cuda")
    if precision == "fp8-tensor":
        convert_to_float8(model)
    elif precision.startswith("fp8-"):
        convert_to_scaled_float8(model, precision.removeprefix("fp8-"), native=True)  # type: ignore[arg-type]
    return median_train_step_s(
        model, batch=args.batch, steps=args.steps, warmup=args.warmup, compiled=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--preset", default="1.3B")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precisions", default="bf16,fp8-tensor,fp8-row,fp8-block")
    parser.add_argument("--out", default="fp8_scaling_check.json")
    # M x K x N. K 768 and 2304 are the 124M GPT's widths, 6 and 18 blocks of 128: cuBLAS
    # reads 128x128 block scales in groups of four K blocks, so these go through the padding
    # of numerics/scaled_matmul.py (PyTorch PR 166752), 2048 does not.
    parser.add_argument("--gemm-shapes", default="4096x2048x1536,4096x768x2304,4096x2304x768")
    args = parser.parse_args()

    result: dict[str, Any] = {"name": "fp8_scaling_check", "config": vars(args)}
    result["bits"] = bits_check()
    print("bits", result["bits"], flush=True)
    result["gemms"] = [
        row
        for shape in args.gemm_shapes.split(",")
        for row in gemm_check(*(int(n) for n in shape.split("x")))
    ]
    result["layers"] = {s: layer_check(s) for s in ("row", "block")}
    print("layers", result["layers"], flush=True)
    write_result(args.out, result)
    step_s: dict[str, list[float]] = {p: [] for p in args.precisions.split(",")}
    for _ in range(args.repeats):
        for precision in step_s:
            try:
                step_s[precision].append(timed(precision, args))
            except Exception as error:
                result.setdefault("errors", {})[precision] = repr(error)[:2000]
                print(precision, "failed:", repr(error)[:2000], flush=True)
                continue
            print(precision, round(step_s[precision][-1] * 1000, 2), "ms", flush=True)
            tokens = args.batch * 1024
            result["steps"] = {
                p: {
                    "step_s": v,
                    "median_step_s": statistics.median(v),
                    "tokens_per_s": tokens / statistics.median(v),
                }
                for p, v in step_s.items()
                if v
            }
            write_result(args.out, result)


if __name__ == "__main__":
    main()
