"""Whether the engine gives a sequence the same logprobs alone as in a batch, on this
machine's CPU: why a tool-using online-RL run, whose batches follow when each tool call
returns, repeats its tokens and rewards but not its logprobs to the bit (docs/agents.md,
"On the real node").

    .venv/bin/python -m benchmarks.engine_batch_invariance

For the built-in GPT's `small` and `124M` presets from seeded fresh weights in float32:
64 prompts of 24 random bytes, 16 tokens each sampled with a fixed seed; once all 64 in
one engine batch, once each alone in a fresh engine. Reported: the completions whose
tokens match, and the largest |logprob difference| over the tokens of those. Beside it the
matrix multiply alone: a (64, d) @ (d, d) product against the same rows one at a time,
counting the rows whose bits differ. Results to
benchmarks/results/engine_batch_invariance.json.
"""

import json
from pathlib import Path
from typing import Any

import torch

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.config.workload import model_preset
from crucible.engine.engine import Engine
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer

PRESETS = ("small", "124M")
PROMPTS = 64
PROMPT_BYTES = 24
TOKENS = 16
RESULTS = Path(__file__).parent / "results" / "engine_batch_invariance.json"


def completions(
    model: torch.nn.Module, prompts: list[list[int]]
) -> list[tuple[list[int], list[float]]]:
    engine = Engine(model, ByteTokenizer(), EngineConfig(num_blocks=PROMPTS * 4))  # type: ignore[arg-type]
    params = SamplingParams(max_tokens=TOKENS, seed=7, ignore_eos=True)
    outputs = engine.generate(prompts, params)
    return [
        (c.tokens, [t.logprob for t in c.logprobs])
        for output in outputs
        for c in output.completions
    ]


def engine_case(preset: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = build_model(model_preset(preset))
    tokenizer = ByteTokenizer()
    generator = torch.Generator().manual_seed(1)
    prompts = [
        [tokenizer.BOS, *torch.randint(32, 127, (PROMPT_BYTES,), generator=generator).tolist()]
        for _ in range(PROMPTS)
    ]
    together = completions(model, prompts)
    alone = [completions(model, [prompt])[0] for prompt in prompts]
    same_tokens = [i for i in range(PROMPTS) if together[i][0] == alone[i][0]]
    differences = [
        abs(a - b) for i in same_tokens for a, b in zip(together[i][1], alone[i][1], strict=True)
    ]
    return {
        "preset": preset,
        "completions": PROMPTS,
        "same_tokens": len(same_tokens),
        "logprobs_bitwise_equal": sum(1 for d in differences if d == 0.0),
        "logprobs_compared": len(differences),
        "max_abs_logprob_difference": max(differences),
    }


def matmul_case(width: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(PROMPTS, width, generator=generator)
    w = torch.randn(width, width, generator=generator)
    batched = x @ w
    single = torch.cat([x[i : i + 1] @ w for i in range(PROMPTS)])
    differing = int((batched != single).any(dim=1).sum())
    return {
        "shape": f"({PROMPTS}, {width}) @ ({width}, {width})",
        "rows_with_other_bits": differing,
        "max_abs_difference": float((batched - single).abs().max()),
    }


def main() -> None:
    torch.set_num_threads(2)
    results = {
        "benchmark": "engine_batch_invariance",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "engine": [engine_case(preset) for preset in PRESETS],
        "matmul": [matmul_case(width) for width in (128, 768)],
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
