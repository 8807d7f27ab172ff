"""Rollout throughput: Crucible's generator against Hugging Face transformers' `generate()` on
the same GPT-2-124M shape, same sampling.

    python benchmarks/gpu/rollout_bench.py compare --batches 1 32 256 --out rollout_alternated.json
    python benchmarks/gpu/rollout_bench.py variants --batches 1 32 256 --out rollout.json

`compare` times the rollout job's own path (what `rollout.rollout` runs on CUDA:
`fast_generator` with the settings it picks for the batch) against HF `generate` in its
default mode (dynamic cache, eager) and in its tuned mode (static cache, the decode forward
compiled by `generate` with CUDA graphs, as HF's inference-optimization guide describes),
the three alternated call by call in one process, so that every system sees the same
machine state; warm-up and compile calls are timed apart. `variants` times each of our
generator's settings once after another (one median each), to choose `fast_generator`'s.

Models are built from a config with random weights (no downloads) and run in bf16; top-p 0.9
sampling at temperature 1 (HF's default top-k 50 switched off), 64-token prompts, exactly
128 new tokens on both sides (HF's EOS off and min_new_tokens = max_new_tokens; our
generator computes every row to the end whatever it samples). Tokens/s counts new tokens.
"""

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from common import out_dir, seconds_of, write_result
from static_generator import StaticGenerator, fast_generator, sample_with_logprob
from torch._dynamo.utils import counters

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.rollouts.rollout import generate

PROMPT_LEN = 64
NEW_TOKENS = 128
TOP_P = 0.9
TARGETS = {1: 20.0, 256: 40.0}
"""Speed-up over HF the issue asks for, by batch size."""

SYSTEMS = ("crucible", "hf_default", "hf_tuned")
"""`compare`'s systems, in the order each round calls them."""


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of `repeats` calls of `fn`, after one untimed warm-up call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def hf_model(config: Any, device: torch.device | str) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_seq_len,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        attn_implementation="sdpa",
    )
    return GPT2LMHeadModel(hf_config).to(device, torch.bfloat16).eval()


def hf_generate(
    model: Any, input_ids: torch.Tensor, new_tokens: int, **mode: Any
) -> Callable[[], Any]:
    """One `generate` call with our sampling: top-p only, exactly `new_tokens` per row."""
    mask = torch.ones_like(input_ids)

    def call() -> Any:
        return model.generate(
            input_ids,
            attention_mask=mask,
            do_sample=True,
            top_p=TOP_P,
            top_k=0,
            temperature=1.0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
            eos_token_id=None,
            **mode,
        )

    return call


def hf_tuned_mode(device: torch.device) -> dict[str, Any]:
    """`generate` kwargs for HF's fast path: a static cache, with which `generate` compiles
    the decode step's forward itself; CompileConfig's mode reduce-overhead replays it as
    CUDA graphs, and fullgraph makes a graph break an error instead of a silent slowdown
    (the settings of HF's guide, which compiles `model.forward` the same way)."""
    from transformers import CompileConfig

    compile_config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    if device.type != "cuda":
        # `generate` compiles only on accelerators; the CPU smoke test asks it to anyway
        # (the flag HF keeps for its own tests) so that the same path is exercised.
        compile_config._compile_all_devices = True
    return {"cache_implementation": "static", "compile_config": compile_config}


class RolloutPath:
    """What `rollout.rollout` does on CUDA for one chunk of `len(prompts)` rows: seed, build
    one `fast_generator` for the chunk's shape (it picks its own settings by batch size),
    call it. The job builds it once and calls it once per chunk, so building it (graph
    capture, and the compile from LARGE_BATCH rows up) lands in the first, untimed call."""

    def __init__(self, model: Any, prompts: list[list[int]], new_tokens: int) -> None:
        self.model, self.prompts, self.new_tokens = model, prompts, new_tokens
        self.generator: StaticGenerator | None = None

    def __call__(self) -> Any:
        if self.generator is None:
            torch.manual_seed(0)
            self.generator = fast_generator(
                self.model,
                batch_size=len(self.prompts),
                max_prompt_len=len(self.prompts[0]),
                max_new_tokens=self.new_tokens,
                temperature=1.0,
                top_p=TOP_P,
            )
        return self.generator(self.prompts, eos_id=None, pad_id=0)

    def settings(self) -> dict[str, Any]:
        """The variant `fast_generator` chose."""
        assert self.generator is not None, "called before the first generation"
        return {
            "cuda_graph": self.generator.graph is not None,
            "compile_sampling": self.generator.sample is not sample_with_logprob,
            "top_p_method": self.generator.top_p_method,
        }


def new_tokens_of(system: str, output: Any, prompt_len: int) -> int:
    """Tokens a call generated per row, to check that every system made exactly as many."""
    if system == "crucible":
        lengths = {len(row) for row in output.tokens}
        if len(lengths) != 1:
            raise AssertionError(f"rows of different lengths: {sorted(lengths)}")
        return lengths.pop()
    return int(output.shape[1]) - prompt_len


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def compare(args: argparse.Namespace) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = model_preset(args.preset)
    ours = build_model(config, device=device).to(torch.bfloat16).eval()
    # Two HF instances: the tuned one keeps its static cache and compiled call between calls,
    # and the default one must not see them.
    models = {"hf_default": hf_model(config, device), "hf_tuned": hf_model(config, device)}
    modes = {"hf_default": {}, "hf_tuned": hf_tuned_mode(device)}
    results = []
    for batch in args.batches:
        torch._dynamo.reset()  # each batch compiles for its own static shapes, on both sides
        prompts = torch.randint(0, config.vocab_size, (batch, args.prompt_len))
        ours_path = RolloutPath(ours, prompts.tolist(), args.new_tokens)
        calls: dict[str, Callable[[], Any]] = {"crucible": ours_path}
        input_ids = prompts.to(device)
        for name in ("hf_default", "hf_tuned"):
            calls[name] = hf_generate(models[name], input_ids, args.new_tokens, **modes[name])
        row: dict[str, Any] = {"batch": batch, "warmup_call_s": {}, "errors": {}}
        skips_before = counters["inductor"]["cudagraph_skips"]
        for name, call in list(calls.items()):
            # The first call builds, captures and compiles; CUDA graphs of reduce-overhead
            # record on a later one. All untimed for the samples, reported here.
            times = []
            try:
                for _ in range(args.warmup_calls):
                    seconds, output = seconds_of(call)
                    times.append(seconds)
                    made = new_tokens_of(name, output, args.prompt_len)
                    if made != args.new_tokens:
                        raise AssertionError(f"generated {made} tokens, not {args.new_tokens}")
            except Exception as error:  # a failed system is recorded; the others still run
                row["errors"][name] = f"{type(error).__name__}: {error}"[:1000]
                del calls[name]
            row["warmup_call_s"][name] = [round(t, 3) for t in times]
        # Inductor logs a skipped CUDA graph only under TORCH_LOGS=cudagraphs; count them here,
        # so that HF's tuned mode is known to have replayed graphs rather than kernels.
        row["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips_before
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.samples):
            for name, call in calls.items():
                samples[name].append(batch * args.new_tokens / seconds_of(call)[0])
        row["tokens_per_s"] = {name: summary(values) for name, values in samples.items()}
        row["samples_tokens_per_s"] = {
            name: [round(v, 1) for v in values] for name, values in samples.items()
        }
        if "crucible" in calls:
            row["crucible_settings"] = ours_path.settings()
        for hf in ("hf_default", "hf_tuned"):
            if "crucible" in samples and hf in samples:
                ours_s, theirs = samples["crucible"], samples[hf]
                # Each round's own ratio too: the systems ran back to back within a round.
                rounds = [a / b for a, b in zip(ours_s, theirs, strict=True)]
                row[f"crucible_over_{hf}"] = {
                    "ratio_of_medians": round(
                        statistics.median(ours_s) / statistics.median(theirs), 2
                    ),
                    "per_round_min": round(min(rounds), 2),
                    "per_round_max": round(max(rounds), 2),
                }
        if not row["errors"]:
            del row["errors"]
        print(json.dumps(row), flush=True)
        results.append(row)
        # Written after every batch, so that a run cut short still returns what it measured.
        write_result(
            out_dir() / args.out,
            {
                "benchmark": "rollout_alternated",
                "config": {
                    "model": f"{args.preset} (GPT-2 shape, vocab {config.vocab_size}), "
                    "random weights",
                    "dtype": "bf16",
                    "sampling": {"temperature": 1.0, "top_p": TOP_P, "top_k": None},
                    "prompt_len": args.prompt_len,
                    "new_tokens": args.new_tokens,
                    "samples": args.samples,
                    "warmup_calls": args.warmup_calls,
                    "order": "each round calls " + ", ".join(SYSTEMS) + ", one call each",
                    "systems": {
                        "crucible": "rollout.rollout's CUDA path: fast_generator with the "
                        "settings it picks for the batch, built in the first warm-up call",
                        "hf_default": "GPT2LMHeadModel.generate, sdpa, dynamic cache, eager",
                        "hf_tuned": "GPT2LMHeadModel.generate, sdpa, "
                        "cache_implementation='static', "
                        "compile_config=CompileConfig(fullgraph=True, mode='reduce-overhead')",
                    },
                },
                "results": results,
            },
        )


def write_profile(model: Any, batch: int, prompts: list[list[int]]) -> None:
    """Kernel time per operator of one eager generation (sort nucleus), to see what a
    decode step spends its time on."""
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    generator = StaticGenerator(
        model,
        batch_size=batch,
        max_prompt_len=PROMPT_LEN,
        max_new_tokens=NEW_TOKENS,
        temperature=1.0,
        top_p=TOP_P,
        cuda_graph=False,
    )
    generator(prompts, eos_id=None, pad_id=0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        generator(prompts, eos_id=None, pad_id=0)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30)
    (out_dir() / f"rollout_profile_b{batch}.txt").write_text(table)


def variants(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    config = model_preset("124M")
    ours = build_model(config, device="cuda").to(torch.bfloat16).eval()
    hf = None if args.skip_hf else hf_model(config, "cuda")
    results = []
    for batch in args.batches:
        prompts = torch.randint(0, 50257, (batch, PROMPT_LEN))
        prompt_lists = prompts.tolist()
        row: dict[str, Any] = {"batch": batch, "new_tokens": NEW_TOKENS, "prompt_len": PROMPT_LEN}
        # (name, CUDA graph, torch.compile of the step, of the sampling only, top-p method).
        # Compiling the whole step pays only where it is launch-bound (batch 1); compiling
        # the sampling alone is for large batches, where the (batch, vocab) passes dominate.
        variants = [
            ("static_cuda_graph", True, False, False, "sort"),
            ("static_cuda_graph_bisect", True, False, False, "bisect"),
            ("static_cuda_graph_compiled_sampling", True, False, True, "sort"),
            ("static_cuda_graph_compiled_sampling_bisect", True, False, True, "bisect"),
            ("static_eager", False, False, False, "sort"),
        ]
        if batch == 1:
            variants += [
                ("static_compiled_cuda_graph", True, True, False, "sort"),
                ("static_compiled_cuda_graph_bisect", True, True, False, "bisect"),
            ]
        for name, graph, compile, compile_sampling, method in variants:
            torch._dynamo.reset()  # each batch size compiles for its own static shapes
            generator = StaticGenerator(
                ours,
                batch_size=batch,
                max_prompt_len=PROMPT_LEN,
                max_new_tokens=NEW_TOKENS,
                temperature=1.0,
                top_p=TOP_P,
                cuda_graph=graph,
                compile=compile,
                compile_sampling=compile_sampling,
                top_p_method=method,
            )
            try:
                seconds = timed(
                    lambda g=generator, p=prompt_lists: g(p, eos_id=None, pad_id=0),
                    args.repeats,
                )
            except Exception as error:  # a failed variant is recorded; the others still run
                row[f"{name}_error"] = f"{type(error).__name__}: {error}"[:1000]
                continue
            row[f"{name}_tokens_per_s"] = round(batch * NEW_TOKENS / seconds, 1)
        # What the rollout job uses (`rollout.rollout` on CUDA): the settings chosen by batch.
        torch._dynamo.reset()
        fast = fast_generator(
            ours,
            batch_size=batch,
            max_prompt_len=PROMPT_LEN,
            max_new_tokens=NEW_TOKENS,
            temperature=1.0,
            top_p=TOP_P,
        )
        seconds = timed(lambda: fast(prompt_lists, eos_id=None, pad_id=0), args.repeats)  # noqa: B023
        row["fast_generator_tokens_per_s"] = round(batch * NEW_TOKENS / seconds, 1)
        # What a step costs without the nucleus (top-p 1: softmax and the draw only).
        torch._dynamo.reset()
        floor = StaticGenerator(
            ours,
            batch_size=batch,
            max_prompt_len=PROMPT_LEN,
            max_new_tokens=NEW_TOKENS,
            temperature=1.0,
            top_p=1.0,
            compile_sampling=True,
        )
        seconds = timed(lambda: floor(prompt_lists, eos_id=None, pad_id=0), args.repeats)  # noqa: B023
        row["no_nucleus_floor_tokens_per_s"] = round(batch * NEW_TOKENS / seconds, 1)
        if args.profile:
            write_profile(ours, batch, prompt_lists)
        torch._dynamo.reset()
        seconds = timed(
            lambda: generate(
                ours,
                prompt_lists,  # noqa: B023 (called within this iteration)
                max_new_tokens=NEW_TOKENS,
                eos_id=-1,
                pad_id=0,
                temperature=1.0,
                top_p=TOP_P,
            ),
            1,
        )
        row["rollout_generate_tokens_per_s"] = round(batch * NEW_TOKENS / seconds, 1)
        if hf is not None:
            call_hf = hf_generate(hf, prompts.cuda(), NEW_TOKENS)

            # The warm-up call doubles as the check that HF generated all 128 tokens.
            out = call_hf()
            assert out.shape == (batch, PROMPT_LEN + NEW_TOKENS), out.shape
            torch.cuda.synchronize()
            started = time.perf_counter()
            call_hf()
            torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            row["hf_tokens_per_s"] = round(batch * NEW_TOKENS / seconds, 1)
            names = ["fast_generator", *(name for name, *_ in variants)]
            best = max(row.get(f"{name}_tokens_per_s", 0.0) for name in names)
            row["speedup_vs_hf"] = round(best / row["hf_tokens_per_s"], 1)
            if batch in TARGETS:
                row["target_speedup"] = TARGETS[batch]
                row["met"] = row["speedup_vs_hf"] >= TARGETS[batch]
        print(json.dumps(row), flush=True)
        results.append(row)
    write_result(
        out_dir() / args.out,
        {
            "benchmark": "rollout",
            "config": {
                "model": "124M (GPT-2 shape, vocab 50304)",
                "dtype": "bf16",
                "sampling": {"temperature": 1.0, "top_p": TOP_P, "top_k": None},
                "prompt_len": PROMPT_LEN,
                "new_tokens": NEW_TOKENS,
            },
            "results": results,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    alternated = commands.add_parser("compare", help="rollout path vs HF, alternated")
    alternated.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    alternated.add_argument("--samples", type=int, default=5, help="timed calls per system")
    alternated.add_argument("--warmup-calls", type=int, default=3)
    alternated.add_argument("--preset", default="124M", help="tiny: a CPU smoke test")
    alternated.add_argument("--prompt-len", type=int, default=PROMPT_LEN)
    alternated.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    alternated.add_argument("--out", default="rollout_alternated.json")
    each = commands.add_parser("variants", help="each generator setting, one after another")
    each.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    each.add_argument("--repeats", type=int, default=3)
    each.add_argument("--skip-hf", action="store_true")
    each.add_argument("--out", default="rollout.json")
    each.add_argument(
        "--profile", action="store_true", help="also write each batch's kernel-time table"
    )
    args = parser.parse_args()
    if args.command == "compare":
        compare(args)
    else:
        variants(args)


if __name__ == "__main__":
    main()
