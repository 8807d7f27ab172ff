"""The serving engine against the static generator it replaces and against Hugging Face
`generate`, on the GPT-2-124M shape.

    python benchmarks/gpu/engine_bench.py --batches 1 32 256 --samples 5 --out engine.json

Four systems (`--systems` picks a subset): "static" (`fast_generator`), "engine" (the
serving engine, built once per batch size and sized for that batch, as
`crucible.engine.batch` sizes it), "hf_default" (`GPT2LMHeadModel.generate`, dynamic cache,
eager) and "hf_tuned" (`generate` with `rollout_bench.hf_tuned_mode`: a static cache and the
decode forward compiled by `generate`, replayed as CUDA graphs). The Hugging Face models hold
the same weights as ours (`export.gpt_to_gpt2_state`), in the same dtype, on the same
device.

All generate exactly `--new-tokens` tokens after `--prompt-len`-token prompts (EOS off), at
temperature 1 without top-p or top-k. They alternate call by call, the order reversed every
other sample (static, engine, hf_default, hf_tuned, then hf_tuned, hf_default, engine,
static, ...), each call on prompts of its own (the engine would otherwise find the last
call's prompt blocks in its cache). The first `--warmup-calls` calls of each system build,
capture and compile; they are timed apart.

Each figure is also given as a fraction of the memory-bandwidth roofline: per decode step the
weights and every row's KV cache so far must be read once, at the device-to-device copy
bandwidth measured in the same process.
"""

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from common import bench_model, byte_corpus, out_dir, seconds_of, synchronize, write_result
from rollout_bench import hf_tuned_mode
from static_generator import fast_generator

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.engine.engine import Engine
from crucible.models.gpt import GPT
from crucible.models.tokenizer import ByteTokenizer
from crucible.training.export import gpt2_config, gpt_to_gpt2_state

BLOCK_SIZE = 16
SYSTEMS = ("static", "engine", "hf_default", "hf_tuned")
HF_SYSTEMS = ("hf_default", "hf_tuned")


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


def hf_copy(model: GPT) -> Any:
    """`model` as a transformers GPT-2 with the same weights, device and dtype (attention as
    transformers picks it by default: SDPA where torch has it, recorded in the results)."""
    from transformers import GPT2LMHeadModel

    weight = model.wte.weight
    hf = GPT2LMHeadModel(gpt2_config(model.config))
    hf.load_state_dict(gpt_to_gpt2_state(model.state_dict(), model.config), strict=False)
    hf.tie_weights()
    return hf.to(weight.device, weight.dtype).eval()


def hf_generate(model: Any, input_ids: torch.Tensor, new_tokens: int, mode: dict[str, Any]) -> None:
    """One `generate` call with the others' sampling: temperature 1, no top-p, no top-k
    (HF's default top-k of 50 off), exactly `new_tokens` per row."""
    output = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=True,
        top_p=1.0,
        top_k=0,
        temperature=1.0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=ByteTokenizer.PAD,
        eos_token_id=None,
        **mode,
    )
    made = output.shape[1] - input_ids.shape[1]
    assert made == new_tokens, f"generated {made} tokens, not {new_tokens}"


def measure(
    model: GPT,
    hf_models: dict[str, Any],
    systems: list[str],
    batch: int,
    args: argparse.Namespace,
    bandwidth: float,
    prompts: Callable[[int], list[list[int]]],
) -> dict[str, Any]:
    """The systems at one batch size: warm-up calls, then `args.samples` alternated calls."""
    # Each batch size compiles for its own static shapes (HF tuned, the static sampler).
    torch._dynamo.reset()
    new, prompt_len = args.new_tokens, args.prompt_len
    calls: dict[str, Callable[[], None]] = {}
    engine_steps: Callable[[], dict[str, Any]] | None = None
    if "static" in systems:
        static = fast_generator(
            model,
            batch_size=batch,
            max_prompt_len=prompt_len,
            max_new_tokens=new,
            temperature=1.0,
            top_p=1.0,
        )

        def run_static() -> None:
            static(prompts(batch), eos_id=None, pad_id=0)

        calls["static"] = run_static
    if "engine" in systems:
        blocks = batch * -(-(prompt_len + new) // BLOCK_SIZE)
        engine = Engine(
            model,
            ByteTokenizer(),
            EngineConfig(block_size=BLOCK_SIZE, num_blocks=blocks, max_running=batch),
        )
        params = SamplingParams(max_tokens=new, temperature=1.0, ignore_eos=True, seed=0)

        def run_engine() -> None:
            outputs = engine.generate(prompts(batch), params)
            assert all(len(o.completions[0].tokens) == new for o in outputs)

        calls["engine"] = run_engine

        def timed_steps() -> dict[str, Any]:
            """One more call, each step timed: where a call's time goes beyond the steps'
            median (not one of the samples)."""
            ids = [engine.add_request(p, params) for p in prompts(batch)]
            seconds = []
            synchronize()
            started = time.perf_counter()
            while engine.has_work:
                step = time.perf_counter()
                engine.step()
                seconds.append(time.perf_counter() - step)
            synchronize()
            total = time.perf_counter() - started
            for request in ids:
                engine.release(request)
            slowest = sorted(range(len(seconds)), key=lambda i: -seconds[i])[:8]
            return {
                "call_s": round(total, 4),
                "steps": len(seconds),
                "steps_s": round(sum(seconds), 4),
                "median_ms": round(statistics.median(seconds) * 1e3, 3),
                "p90_ms": round(sorted(seconds)[len(seconds) * 9 // 10] * 1e3, 3),
                "slowest_ms": [[i, round(seconds[i] * 1e3, 2)] for i in slowest],
                "gc_s": round(GC_CLOCK.take(), 4),
            }

        engine_steps = timed_steps
    device = model.wte.weight.device
    for name in HF_SYSTEMS:
        if name in systems:
            mode = hf_tuned_mode(device) if name == "hf_tuned" else {}

            def run_hf(hf: Any = hf_models[name], mode: dict[str, Any] = mode) -> None:
                hf_generate(hf, torch.tensor(prompts(batch), device=device), new, mode)

            calls[name] = run_hf
    order = [name for name in SYSTEMS if name in calls]
    warmup = {name: [timed(calls[name]) for _ in range(args.warmup_calls)] for name in order}
    # What the warm-ups built (compiled graphs above all) lives on: frozen, it is not
    # rescanned by the collections the timed calls trigger, for every system alike.
    gc.collect()
    gc.freeze()
    times: dict[str, list[float]] = {name: [] for name in order}
    gc_seconds: dict[str, list[float]] = {name: [] for name in order}
    for sample in range(args.samples):
        for name in order if sample % 2 == 0 else order[::-1]:
            times[name].append(timed(calls[name]))
            gc_seconds[name].append(GC_CLOCK.take())
    diagnosis = engine_steps() if engine_steps is not None else None
    floor = roofline_seconds(model, batch, prompt_len, new, bandwidth)
    result: dict[str, Any] = {
        name: {
            "seconds": [round(t, 4) for t in values],
            "tokens_per_s": round(batch * new / statistics.median(values)),
            "tokens_per_s_range": [
                round(batch * new / max(values)),
                round(batch * new / min(values)),
            ],
            "roofline_fraction": round(floor / statistics.median(values), 3),
            "warmup_seconds": [round(t, 2) for t in warmup[name]],
            "gc_seconds": [round(t, 4) for t in gc_seconds[name]],
        }
        for name, values in times.items()
    }
    result["roofline_seconds"] = round(floor, 4)
    if diagnosis is not None:
        result["engine_steps"] = diagnosis
    print(batch, result, flush=True)
    return result


class GcClock:
    """Seconds spent in Python's garbage collections since the last `take()`: a call slowed
    by them shows it in the results."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


GC_CLOCK = GcClock()


def timed(call: Callable[[], None]) -> float:
    synchronize()
    GC_CLOCK.take()
    return seconds_of(call)[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument(
        "--warmup-calls",
        type=int,
        default=3,
        help="untimed calls per system first (HF tuned compiles on the first, records its "
        "CUDA graphs on a later one)",
    )
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--out", default="engine.json")
    parser.add_argument(
        "--device", default="cuda", help="cpu (with --preset small) only to try the script"
    )
    parser.add_argument("--preset", default="124M")
    args = parser.parse_args()

    model = bench_model(args.preset, args.device)
    # One HF instance per mode: the tuned one keeps its static cache and compiled forward
    # between calls, and the default one must not see them.
    hf_models = {name: hf_copy(model) for name in HF_SYSTEMS if name in args.systems}
    bandwidth = copy_bandwidth(args.device)
    # The timed and warm-up calls, and the engine's one call timed step by step.
    calls = len(args.systems) * (args.samples + args.warmup_calls) + 1
    corpus = byte_corpus(args.prompt_len * sum(args.batches) * calls)
    offset = 0

    def prompts(batch: int) -> list[list[int]]:
        nonlocal offset
        size = args.prompt_len
        rows = corpus[offset : offset + batch * size].view(batch, size).tolist()
        offset += batch * size
        return rows

    results = {}
    for batch in args.batches:
        results[str(batch)] = measure(
            model, hf_models, args.systems, batch, args, bandwidth, prompts
        )
        # Written after every batch, so that a call stopped at its time limit keeps the rest.
        write_result(
            out_dir() / args.out,
            {
                "benchmark": "engine_vs_static_vs_hf",
                "preset": args.preset,
                "dtype": str(model.wte.weight.dtype),
                "prompt_len": args.prompt_len,
                "new_tokens": args.new_tokens,
                "samples": args.samples,
                "systems": args.systems,
                "hf_tuned": "cache_implementation='static', "
                "compile_config=CompileConfig(fullgraph=True, mode='reduce-overhead')",
                "hf_attention": {
                    name: hf.config._attn_implementation for name, hf in hf_models.items()
                },
                "copy_bandwidth_bytes_per_s": round(bandwidth),
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
