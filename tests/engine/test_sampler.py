"""The counter-based sampler draws from the distribution it is given, and from nothing else."""

import pytest
import torch

from crucible.engine.sampler import SamplingRows, exponential_noise, sample

ROWS = 20_000


def rows(
    count: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
) -> SamplingRows:
    return SamplingRows(
        temperature=torch.full((count,), temperature),
        top_p=torch.full((count,), top_p),
        top_k=torch.full((count,), top_k, dtype=torch.long),
        seeds=torch.full((count,), seed, dtype=torch.long),
        positions=torch.arange(count),
        filtered=top_p < 1.0 or top_k > 0,
        top_logprobs=0,
    )


LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def frequencies(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=LOGITS.numel()).float() / tokens.numel()


def test_noise_is_exponential_and_a_function_of_seed_position_and_token() -> None:
    seeds = torch.tensor([1, 1, 2])
    positions = torch.tensor([5, 6, 5])
    noise = exponential_noise(seeds, positions, 50_000)
    assert torch.equal(noise, exponential_noise(seeds, positions, 50_000))
    assert not torch.equal(noise[0], noise[1]) and not torch.equal(noise[0], noise[2])
    assert noise.mean().item() == pytest.approx(1.0, abs=0.02)
    assert noise.var().item() == pytest.approx(1.0, abs=0.05)
    assert bool((noise > 0).all())


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_samples_follow_the_tempered_softmax(temperature: float) -> None:
    drawn = sample(LOGITS.expand(ROWS, -1), rows(ROWS, temperature=temperature)).tokens
    expected = torch.softmax(LOGITS / temperature, dim=-1)
    # Three standard errors of a frequency at this many draws.
    tolerance = 3 * (expected * (1 - expected) / ROWS).sqrt() + 1e-4
    assert bool(((frequencies(drawn) - expected).abs() <= tolerance).all())


def test_top_k_then_top_p_keep_what_transformers_keeps() -> None:
    drawn = sample(LOGITS.expand(ROWS, -1), rows(ROWS, top_k=4, top_p=0.75)).tokens
    kept = torch.softmax(LOGITS[:4], dim=-1)  # the top 4, renormalised: 0.58, 0.21, 0.13, 0.08
    # The nucleus of 0.75 over those: the first two, whose 0.79 reaches it.
    nucleus = kept[:2] / kept[:2].sum()
    seen = frequencies(drawn)
    assert seen[2:].sum().item() == 0.0
    assert seen[:2] == pytest.approx(nucleus, abs=0.015)


def test_greedy_and_one_token_filters_take_the_argmax() -> None:
    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0))
    best = logits.argmax(dim=-1)
    assert torch.equal(sample(logits, rows(64, temperature=0.0)).tokens, best)
    assert torch.equal(sample(logits, rows(64, top_k=1)).tokens, best)
    assert torch.equal(sample(logits, rows(64, top_p=1e-6)).tokens, best)


def test_logprobs_are_of_the_untempered_distribution() -> None:
    logits = torch.randn(8, 40, generator=torch.Generator().manual_seed(1))
    drawn = sample(logits, rows(8, temperature=0.7, top_p=0.9))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, drawn.tokens[:, None]).squeeze(-1)
    assert torch.allclose(drawn.logprobs, expected)
