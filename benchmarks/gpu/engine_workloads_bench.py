"""Two workloads where the serving engine should beat fixed batches, on the GPT-2-124M shape.

    python benchmarks/gpu/engine_workloads_bench.py --samples 3 --out engine_workloads.json

`--parts mixed` (mixed lengths): `--prompts` prompts whose completion lengths are drawn
log-uniform between `--min-new` and `--max-new` tokens (fixed seed). The engine gets every
prompt at once, each with its own `max_tokens`, and steps until all are done; the static
generator (`fast_generator`) takes them `--batch` rows at a time, in the same order, each
batch running to its longest row's length. Completions ignore EOS and stop at their drawn
length: that stands in for an EOS sampled at exactly those positions (a random model's EOS
would fall anywhere), so both systems make the same useful tokens. Useful tokens/s is the
sum of the drawn lengths over the wall time, for both.

`--parts prefix` (prefix sharing): `--shared-prompts` prompts of `--shared-prompt-len`
tokens, `--n` samples each (one request with `n`), through an engine with prefix caching and
one without (`EngineConfig.prefix_caching`). Reported: tokens/s, and the most KV blocks
held at once (read after every step) with their bytes.

Systems alternate call by call, the order reversed every other sample; every call has
prompts of its own (an engine would otherwise find the last call's prompts in its cache).
Each system's first call (graph capture, compile) is a warm-up, timed apart. Medians, with
the range of the samples.
"""

import argparse
import gc
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from common import bench_model, byte_corpus, out_dir, seconds_of, write_result
from static_generator import StaticGenerator, fast_generator

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.engine.engine import Engine
from crucible.engine.models import bytes_per_block
from crucible.models.gpt import GPT
from crucible.models.tokenizer import ByteTokenizer

BLOCK_SIZE = 16
PARTS = ("mixed", "prefix")


class Prompts:
    """Fresh prompts from real text (`common.byte_corpus`) for every call."""

    def __init__(self, num_tokens: int) -> None:
        self.corpus = byte_corpus(num_tokens)
        self.offset = 0

    def take(self, count: int, length: int) -> list[list[int]]:
        end = self.offset + count * length
        if end > len(self.corpus):
            raise RuntimeError("the prompt corpus ran out: it is sized too small")
        rows = self.corpus[self.offset : end].view(count, length).tolist()
        self.offset = end
        return rows


def drawn_lengths(count: int, low: int, high: int, seed: int = 0) -> list[int]:
    """Completion lengths log-uniform in [low, high]: as many short as long ones per octave."""
    rng = random.Random(seed)
    return [round(math.exp(rng.uniform(math.log(low), math.log(high)))) for _ in range(count)]


def blocks_for(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE)


def run_engine(engine: Engine, requests: list[tuple[list[int], SamplingParams]]) -> dict[str, int]:
    """Queue every request at once and step until all are done: the most KV blocks held at
    once, and the prompt tokens computed (those found in cached blocks are not)."""
    computed = engine.counters.prompt_tokens
    ids = [engine.add_request(prompt, params) for prompt, params in requests]
    peak = 0
    while engine.has_work:
        engine.step()
        peak = max(peak, engine.pool.used)
    for request_id, (_, params) in zip(ids, requests, strict=True):
        made = [len(c.tokens) for c in engine.release(request_id).completions]
        assert made == [params.max_tokens] * params.n, (made, params.max_tokens)
    return {
        "peak_kv_blocks": peak,
        "prompt_tokens_computed": engine.counters.prompt_tokens - computed,
    }


def alternate(calls: dict[str, Callable[[], Any]], samples: int) -> dict[str, Any]:
    """One warm-up call of each, then `samples` rounds in alternating order: seconds and
    what each call returned."""
    names = list(calls)
    warmup = {name: seconds_of(calls[name])[0] for name in names}
    # What the warm-ups built lives on, frozen: the collections the timed calls trigger do
    # not rescan it (as in engine_bench.py).
    gc.collect()
    gc.freeze()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    returned: dict[str, list[Any]] = {name: [] for name in names}
    for sample in range(samples):
        for name in names if sample % 2 == 0 else names[::-1]:
            took, value = seconds_of(calls[name])
            seconds[name].append(took)
            returned[name].append(value)
    return {"warmup": warmup, "seconds": seconds, "returned": returned}


def rates(tokens: int, seconds: list[float]) -> dict[str, Any]:
    return {
        "seconds": [round(s, 3) for s in seconds],
        "tokens_per_s": round(tokens / statistics.median(seconds)),
        "tokens_per_s_range": [round(tokens / max(seconds)), round(tokens / min(seconds))],
    }


def mixed(model: GPT, args: argparse.Namespace, prompts: Prompts) -> dict[str, Any]:
    lengths = drawn_lengths(args.prompts, args.min_new, args.max_new)
    batches = [lengths[i : i + args.batch] for i in range(0, len(lengths), args.batch)]
    # One generator per batch, built before any timing: each is sized for its batch's
    # longest row, as a static batch must be, and keeps its captured graph between calls.
    generators: list[StaticGenerator] = [
        fast_generator(
            model,
            batch_size=args.batch,
            max_prompt_len=args.prompt_len,
            max_new_tokens=max(batch),
            temperature=1.0,
            top_p=1.0,
        )
        for batch in batches
    ]
    engine = Engine(
        model,
        ByteTokenizer(),
        EngineConfig(
            block_size=BLOCK_SIZE,
            num_blocks=args.batch * blocks_for(args.prompt_len + args.max_new),
            max_running=args.batch,
        ),
    )

    def static() -> None:
        for generator, batch in zip(generators, batches, strict=True):
            generator(prompts.take(len(batch), args.prompt_len), eos_id=None, pad_id=0)

    def continuous() -> dict[str, int]:
        rows = prompts.take(len(lengths), args.prompt_len)
        return run_engine(
            engine,
            [
                (row, SamplingParams(max_tokens=length, ignore_eos=True, seed=i))
                for i, (row, length) in enumerate(zip(rows, lengths, strict=True))
            ],
        )

    timings = alternate({"static": static, "engine": continuous}, args.samples)
    useful = sum(lengths)
    result: dict[str, Any] = {
        "prompts": args.prompts,
        "prompt_len": args.prompt_len,
        "lengths": {
            "distribution": f"log-uniform {args.min_new}..{args.max_new}, seed 0",
            "mean": round(statistics.fmean(lengths), 1),
            "median": statistics.median(lengths),
            "useful_tokens": useful,
        },
        "batch": args.batch,
        "static_batch_lengths": [max(batch) for batch in batches],
        "static_computed_tokens": sum(args.batch * max(batch) for batch in batches),
    }
    for name, seconds in timings["seconds"].items():
        result[name] = rates(useful, seconds) | {
            "warmup_seconds": round(timings["warmup"][name], 2)
        }
    seconds = timings["seconds"]
    ratios = [s / e for s, e in zip(seconds["static"], seconds["engine"], strict=True)]
    result["engine_over_static"] = {
        "ratio_of_medians": round(
            result["engine"]["tokens_per_s"] / result["static"]["tokens_per_s"], 2
        ),
        "per_round": [round(r, 2) for r in ratios],
        "target": 2.0,
    }
    print("mixed", result, flush=True)
    return result


def prefix(model: GPT, args: argparse.Namespace, prompts: Prompts) -> dict[str, Any]:
    rows = args.shared_prompts * args.n
    config = EngineConfig(
        block_size=BLOCK_SIZE,
        # Room for every sample's own copy of its prompt: what the engine without sharing needs.
        num_blocks=rows * blocks_for(args.shared_prompt_len + args.shared_new),
        max_running=rows,
    )
    engines = {
        "shared": Engine(model, ByteTokenizer(), config),
        "unshared": Engine(model, ByteTokenizer(), replace(config, prefix_caching=False)),
    }
    for name, engine in engines.items():
        if engine.scheduler.prefix_caching != engine.config.prefix_caching:
            raise SystemExit(
                f"the {name} engine's scheduler has prefix_caching="
                f"{engine.scheduler.prefix_caching}, its config {engine.config.prefix_caching}: "
                "Engine does not pass EngineConfig.prefix_caching to its Scheduler"
            )

    def call(engine: Engine) -> Callable[[], dict[str, int]]:
        def run() -> dict[str, int]:
            batch = prompts.take(args.shared_prompts, args.shared_prompt_len)
            params = [
                SamplingParams(max_tokens=args.shared_new, n=args.n, ignore_eos=True, seed=i)
                for i in range(len(batch))
            ]
            return run_engine(engine, list(zip(batch, params, strict=True)))

        return run

    timings = alternate({name: call(engine) for name, engine in engines.items()}, args.samples)
    per_block = bytes_per_block(model, BLOCK_SIZE)
    tokens = rows * args.shared_new
    result: dict[str, Any] = {
        "prompts": args.shared_prompts,
        "prompt_len": args.shared_prompt_len,
        "n": args.n,
        "new_tokens": args.shared_new,
        "kv_bytes_per_block": per_block,
    }
    for name, seconds in timings["seconds"].items():
        calls = timings["returned"][name]
        peaks = [c["peak_kv_blocks"] for c in calls]
        result[name] = rates(tokens, seconds) | {
            "warmup_seconds": round(timings["warmup"][name], 2),
            "peak_kv_blocks": peaks,
            "peak_kv_bytes": max(peaks) * per_block,
            "prompt_tokens_computed": [c["prompt_tokens_computed"] for c in calls],
        }
    result["shared_over_unshared"] = {
        "tokens_per_s": round(
            result["shared"]["tokens_per_s"] / result["unshared"]["tokens_per_s"], 2
        ),
        "peak_kv_bytes": round(
            result["shared"]["peak_kv_bytes"] / result["unshared"]["peak_kv_bytes"], 3
        ),
    }
    print("prefix", result, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=1024, help="mixed: prompts")
    parser.add_argument("--prompt-len", type=int, default=64, help="mixed: prompt tokens")
    parser.add_argument("--min-new", type=int, default=16, help="mixed: shortest completion")
    parser.add_argument(
        "--max-new",
        type=int,
        default=960,
        help="mixed: longest completion (prompt plus completion within the model's context)",
    )
    parser.add_argument("--batch", type=int, default=256, help="mixed: static batch size")
    parser.add_argument("--shared-prompts", type=int, default=32, help="prefix: prompts")
    parser.add_argument("--shared-prompt-len", type=int, default=512, help="prefix: prompt tokens")
    parser.add_argument("--n", type=int, default=8, help="prefix: samples per prompt")
    parser.add_argument("--shared-new", type=int, default=256, help="prefix: tokens per sample")
    parser.add_argument("--out", default="engine_workloads.json")
    parser.add_argument(
        "--device", default="cuda", help="cpu (with --preset small) only to try the script"
    )
    parser.add_argument("--preset", default="124M")
    args = parser.parse_args()

    model = bench_model(args.preset, args.device)
    calls = 2 * (args.samples + 1)
    prompts = Prompts(
        calls * (args.prompts * args.prompt_len + args.shared_prompts * args.shared_prompt_len)
    )
    results: dict[str, Any] = {}
    for part in args.parts:
        results[part] = (mixed if part == "mixed" else prefix)(model, args, prompts)
        write_result(
            out_dir() / args.out,
            {
                "benchmark": "engine_workloads",
                "preset": args.preset,
                "dtype": str(model.wte.weight.dtype),
                "samples": args.samples,
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
