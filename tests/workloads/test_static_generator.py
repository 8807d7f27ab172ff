"""The static-KV-cache generator (benchmarks/gpu/static_generator.py, the rollout benchmark's
baseline): token for token the uncached path's greedy output on CPU."""

import sys
from pathlib import Path

import pytest
import torch

from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.rollout import generate

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "gpu"))
from static_generator import StaticGenerator, top_p_mask

TOK = ByteTokenizer()
PROMPTS = ["1+2=", "37+58=", "9*9=", "123-4=", "7="]


def test_static_greedy_equals_uncached_greedy_token_for_token(model) -> None:
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    uncached = generate(
        model, prompts, max_new_tokens=12, eos_id=TOK.EOS, pad_id=TOK.PAD, use_cache=False
    )
    # A larger batch and longer prompt slot than needed: padding rows and columns are ignored.
    generator = StaticGenerator(model, batch_size=8, max_prompt_len=10, max_new_tokens=12)
    static = generator(prompts, eos_id=TOK.EOS, pad_id=TOK.PAD)
    assert static.tokens == uncached.tokens
    assert len({tuple(t) for t in static.tokens}) > 1
    for a, b in zip(static.logprobs, uncached.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    # Reusing the generator gives the same answer again.
    assert generator(prompts, eos_id=TOK.EOS, pad_id=TOK.PAD).tokens == static.tokens


def test_output_stops_after_eos(model) -> None:
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    full = StaticGenerator(model, batch_size=5, max_prompt_len=7, max_new_tokens=8)
    tokens = full(prompts, eos_id=None, pad_id=TOK.PAD).tokens
    eos = tokens[0][2]
    cut = full(prompts, eos_id=eos, pad_id=TOK.PAD).tokens
    assert cut[0] == tokens[0][: tokens[0].index(eos) + 1]


def test_sampling_is_seeded_and_stays_in_the_nucleus(model) -> None:
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    generator = StaticGenerator(
        model, batch_size=5, max_prompt_len=7, max_new_tokens=10, temperature=1.0, top_p=0.5
    )
    torch.manual_seed(1)
    first = generator(prompts, eos_id=None, pad_id=TOK.PAD).tokens
    torch.manual_seed(1)
    assert generator(prompts, eos_id=None, pad_id=TOK.PAD).tokens == first
    assert all(len(row) == 10 for row in first)


@pytest.mark.parametrize("method", ["sort", "bisect"])
def test_compiled_sampling_keeps_only_the_nucleus(model, method) -> None:
    """The compiled sampler (softmax, nucleus, draw and logprob fused): at top_p 1e-6 the
    nucleus is the top token, so sampling at temperature 1 must give greedy's tokens and
    the same log-probabilities."""
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    greedy = StaticGenerator(model, batch_size=5, max_prompt_len=7, max_new_tokens=6)
    expected = greedy(prompts, eos_id=None, pad_id=TOK.PAD)
    compiled = StaticGenerator(
        model,
        batch_size=5,
        max_prompt_len=7,
        max_new_tokens=6,
        temperature=1.0,
        top_p=1e-6,
        compile_sampling=True,
        top_p_method=method,
    )
    got = compiled(prompts, eos_id=None, pad_id=TOK.PAD)
    assert got.tokens == expected.tokens
    for a, b in zip(got.logprobs, expected.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


@pytest.mark.parametrize("method", ["sort", "bisect"])
@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9])
def test_top_p_keeps_the_tokens_rollout_sampling_keeps(top_p, method) -> None:
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(16, 264) * 3, dim=-1)
    # rollout.sample_next's rule: drop a token once those ranked above it reach top_p.
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = ~(sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p)
    expected = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, keep_sorted)
    assert torch.equal(top_p_mask(probs, top_p, method), expected)


def test_too_long_a_request_is_refused(model) -> None:
    with pytest.raises(ValueError, match="max_seq_len=64"):
        StaticGenerator(model, batch_size=1, max_prompt_len=60, max_new_tokens=8)
