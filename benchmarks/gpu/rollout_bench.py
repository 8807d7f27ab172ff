"""Rollout throughput: our static-KV-cache generator (CUDA-graph decode step) against Hugging
Face transformers' `generate()` on the same GPT-2-124M shape, same sampling.

    python benchmarks/gpu/rollout_bench.py --batches 1 32 256

Both models are built from a config with random weights (no downloads) and run in bf16;
top-p 0.9 sampling at temperature 1 (HF's default top-k 50 switched off), 64-token prompts,
exactly 128 new tokens (EOS ignored on both sides). Tokens/s counts new tokens only; each
figure is the median of a few timed calls after a warm-up call.
"""

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from common import out_dir, write_result

from crucible.workloads.config import model_preset
from crucible.workloads.generate import StaticGenerator, fast_generator
from crucible.workloads.model import build_model
from crucible.workloads.rollout import generate

PROMPT_LEN = 64
NEW_TOKENS = 128
TOP_P = 0.9
TARGETS = {1: 20.0, 256: 40.0}
"""Speed-up over HF the issue asks for, by batch size."""


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


def hf_model(config: Any) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_seq_len,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        attn_implementation="sdpa",
    )
    return GPT2LMHeadModel(hf_config).to("cuda", torch.bfloat16).eval()


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--out", default="rollout.json")
    parser.add_argument(
        "--profile", action="store_true", help="also write each batch's kernel-time table"
    )
    args = parser.parse_args()

    torch.manual_seed(0)
    config = model_preset("124M")
    ours = build_model(config, device="cuda").to(torch.bfloat16).eval()
    hf = None if args.skip_hf else hf_model(config)
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
            input_ids = prompts.cuda()
            mask = torch.ones_like(input_ids)

            def hf_generate(new_tokens: int = NEW_TOKENS) -> Any:
                return hf.generate(
                    input_ids,  # noqa: B023 (called within this iteration)
                    attention_mask=mask,  # noqa: B023 (called within this iteration)
                    do_sample=True,
                    top_p=TOP_P,
                    top_k=0,
                    temperature=1.0,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    pad_token_id=0,
                    eos_token_id=None,
                )

            # The warm-up call doubles as the check that HF generated all 128 tokens.
            out = hf_generate()
            assert out.shape == (batch, PROMPT_LEN + NEW_TOKENS), out.shape
            torch.cuda.synchronize()
            started = time.perf_counter()
            hf_generate()
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


if __name__ == "__main__":
    main()
