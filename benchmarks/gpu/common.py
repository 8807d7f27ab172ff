"""What the GPU benchmarks share: the import path, the corpus, the model they measure, timing
with the device's queue drained, the environment record and the results file format. Imports
only torch and the workloads library, so the scripts run on a machine that has PyTorch and
nothing else of ours."""

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "services"))

import torch  # noqa: E402

from crucible.config.workload import model_preset  # noqa: E402

PEAK_BF16_FLOPS = 989e12
"""H100/H200 SXM dense bf16 tensor-core peak, the MFU denominator the issue fixes."""


def environment() -> dict[str, Any]:
    """Device and versions, for the results file."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["device_count"] = torch.cuda.device_count()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    else:
        env["device"] = "cpu"
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def byte_corpus(num_bytes: int) -> torch.Tensor:
    """`num_bytes` of real text as byte ids (0..255): the Python sources of the installed
    torch package, in sorted path order, so every machine with the same torch reads the
    same data. Repeats the sources if they are shorter than asked for."""
    root = Path(torch.__file__).parent  # purelib/torch, or wherever PYTHONPATH found it
    chunks: list[bytes] = []
    size = 0
    paths = sorted(root.rglob("*.py"))
    if not paths:
        raise RuntimeError(f"no Python sources under {root} to build the corpus from")
    while size < num_bytes:
        for path in paths:
            data = path.read_bytes()
            chunks.append(data)
            size += len(data)
            if size >= num_bytes:
                break
    corpus = b"".join(chunks)[:num_bytes]
    return torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()


def write_result(path: Path | str, payload: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": environment(), **payload}, indent=2) + "\n")


def out_dir() -> Path:
    """$OUT on the device machine, else benchmarks/results/gpu/raw."""
    return Path(os.environ.get("OUT") or REPO / "benchmarks" / "results" / "gpu" / "raw")


def synchronize() -> None:
    """Wait for the device's queued work (nothing on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def seconds_of(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call of `fn`, device work included, and what it returned."""
    synchronize()
    started = time.perf_counter()
    output = fn()
    synchronize()
    return time.perf_counter() - started, output


def bench_model(preset: str, device: str) -> Any:
    """The built-in GPT of `preset` with fresh weights from seed 0, in bf16 on CUDA, in
    eval mode: the model the generation benchmarks measure."""
    from crucible.models.gpt import build_model

    torch.manual_seed(0)
    model = build_model(model_preset(preset), device=device)
    if device == "cuda":
        model = model.to(torch.bfloat16)
    return model.eval()


def median_train_step_s(
    model: torch.nn.Module, *, batch: int, steps: int, warmup: int, compiled: bool
) -> float:
    """The median wall seconds of `steps` training steps of the built-in GPT `model` on CUDA
    (bf16 autocast, fused AdamW, random tokens of 1,024 positions), after `warmup` steps."""
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, 50304, (batch, 1025), device="cuda")
    times = []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = forward(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 1), tokens[:, 1:].flatten()
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - started)
    del forward, optimizer
    torch.cuda.empty_cache()
    return statistics.median(times)
