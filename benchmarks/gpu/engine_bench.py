"""The serving engine against the static generator it replaces, on the GPT-2-124M shape.

    python benchmarks/gpu/engine_bench.py --batches 1 32 256 --samples 3 --out engine.json

Both generate exactly `--new-tokens` tokens after `--prompt-len`-token prompts (EOS off),
at temperature 1 without top-p, from the same bf16 model with random weights; the two
alternate call by call (static, engine, engine, static, ...), each call on prompts of its
own (the engine would otherwise find the last call's prompt blocks in its cache). The
engine is built once per batch size, sized for that batch, as `crucible.engine.batch`
sizes it; its first call and the static generator's (which captures its CUDA graph) are
warm-ups, timed apart.

Each figure is also given as a fraction of the memory-bandwidth roofline: per decode step the
weights and every row's KV cache so far must be read once, at the device-to-device copy
bandwidth measured in the same process.
"""

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from common import byte_corpus, out_dir, write_result

from crucible.engine.config import EngineConfig
from crucible.engine.engine import Engine
from crucible.engine.params import SamplingParams
from crucible.workloads.config import model_preset
from crucible.workloads.generate import fast_generator
from crucible.workloads.model import build_model
from crucible.workloads.tokenizer import ByteTokenizer

BLOCK_SIZE = 16


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a large copy on `device`, reads plus writes."""
    size = 2 * 2**30 if device == "cuda" else 2**28
    source = torch.empty(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    synchronize()
    started = time.perf_counter()
    for _ in range(10):
        target.copy_(source)
    synchronize()
    return 2 * source.numel() * 10 / (time.perf_counter() - started)


def roofline_seconds(
    model: Any, batch: int, prompt_len: int, new_tokens: int, bandwidth: float
) -> float:
    """The least time `new_tokens` decode steps of `batch` rows can take: weights plus each
    row's keys and values so far, read once per step."""
    config = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    per_position = 2 * config.n_layer * config.d_model * model.wte.weight.element_size()
    total = 0.0
    for step in range(new_tokens):
        total += weights + batch * (prompt_len + step) * per_position
    return total / bandwidth


def measure(
    model: Any,
    batch: int,
    prompt_len: int,
    new: int,
    samples: int,
    bandwidth: float,
    prompts: Callable[[int], list[list[int]]],
) -> dict[str, Any]:
    """Both generators at one batch size: warm-up calls, then `samples` alternated calls."""
    static = fast_generator(
        model,
        batch_size=batch,
        max_prompt_len=prompt_len,
        max_new_tokens=new,
        temperature=1.0,
        top_p=1.0,
    )
    blocks = batch * -(-(prompt_len + new) // BLOCK_SIZE)
    engine = Engine(
        model,
        ByteTokenizer(),
        EngineConfig(block_size=BLOCK_SIZE, num_blocks=blocks, max_running=batch),
    )
    params = SamplingParams(max_tokens=new, temperature=1.0, ignore_eos=True, seed=0)

    def run_static() -> None:
        static(prompts(batch), eos_id=None, pad_id=0)

    def run_engine() -> None:
        outputs = engine.generate(prompts(batch), params)
        assert all(len(o.completions[0].tokens) == new for o in outputs)

    systems = [("static", run_static), ("engine", run_engine)]
    warmup = {name: timed(call) for name, call in systems}
    times: dict[str, list[float]] = {"static": [], "engine": []}
    for sample in range(samples):
        for name, call in systems if sample % 2 == 0 else systems[::-1]:
            times[name].append(timed(call))
    floor = roofline_seconds(model, batch, prompt_len, new, bandwidth)
    result: dict[str, Any] = {
        name: {
            "seconds": [round(t, 4) for t in values],
            "tokens_per_s": round(batch * new / statistics.median(values)),
            "roofline_fraction": round(floor / statistics.median(values), 3),
            "first_call_seconds": round(warmup[name], 2),
        }
        for name, values in times.items()
    }
    result["roofline_seconds"] = round(floor, 4)
    print(batch, result, flush=True)
    return result


def timed(call: Callable[[], None]) -> float:
    synchronize()
    started = time.perf_counter()
    call()
    synchronize()
    return time.perf_counter() - started


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--out", default="engine.json")
    parser.add_argument(
        "--device", default="cuda", help="cpu (with --preset small) only to try the script"
    )
    parser.add_argument("--preset", default="124M")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(model_preset(args.preset), device=args.device)
    if args.device == "cuda":
        model = model.to(torch.bfloat16)
    model.eval()
    bandwidth = copy_bandwidth(args.device)
    corpus = byte_corpus(args.prompt_len * max(args.batches) * (2 * args.samples + 2) * 2)
    offset = 0

    def prompts(batch: int) -> list[list[int]]:
        nonlocal offset
        size = args.prompt_len
        rows = corpus[offset : offset + batch * size].view(batch, size).tolist()
        offset += batch * size
        return rows

    results = {
        str(batch): measure(
            model, batch, args.prompt_len, args.new_tokens, args.samples, bandwidth, prompts
        )
        for batch in args.batches
    }
    write_result(
        out_dir() / args.out,
        {
            "benchmark": "engine_vs_static",
            "prompt_len": args.prompt_len,
            "new_tokens": args.new_tokens,
            "copy_bandwidth_bytes_per_s": round(bandwidth),
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
