"""The fused Triton sampler draws the tokens that sampler.sample's tensor path draws.

The kernel runs in Triton's interpreter, on CPU tensors. Triton picks the interpreter when
a kernel is defined, from TRITON_INTERPRET, so the kernel runs in a child process started
with it set; this process computes the tensor path and compares.
"""

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from crucible.engine.sampler import Sampled, SamplingRows, sample

pytest.importorskip("triton", reason="the fused sampler is a Triton kernel; Triton is absent")

# More than one of the kernel's blocks, and not a whole number of them: the loop carries its
# running values across blocks and masks a partial last one.
VOCAB = 2500
TEMPERATURES = [0.0, 0.5, 1.0, 2.0]
ROWS = 16

# sample() takes the fused path only for CUDA logits; the child calls that path directly.
_CHILD = """
import sys
import torch
from crucible.engine.sampler import SamplingRows, _sample_fused

drawn = {}
for name, case in torch.load(sys.argv[1]).items():
    result = _sample_fused(case["logits"], SamplingRows(**case["rows"]))
    drawn[name] = {k: v for k, v in vars(result).items() if v is not None}
torch.save(drawn, sys.argv[2])
"""


def rows(count: int, *, seed: int, top_logprobs: int = 0) -> SamplingRows:
    generator = torch.Generator().manual_seed(seed)
    return SamplingRows(
        temperature=torch.tensor(TEMPERATURES).repeat(count // len(TEMPERATURES)),
        top_p=torch.ones(count),
        top_k=torch.zeros(count, dtype=torch.long),
        seeds=torch.randint(-(2**62), 2**62, (count,), generator=generator),
        positions=torch.randint(0, 4096, (count,), generator=generator),
        filtered=False,
        top_logprobs=top_logprobs,
    )


def logits(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(ROWS, VOCAB, generator=generator)


def subset(batch: SamplingRows, index: list[int]) -> SamplingRows:
    return SamplingRows(
        temperature=batch.temperature[index],
        top_p=batch.top_p[index],
        top_k=batch.top_k[index],
        seeds=batch.seeds[index],
        positions=batch.positions[index],
        filtered=batch.filtered,
        top_logprobs=batch.top_logprobs,
    )


def tied(seed: int) -> torch.Tensor:
    """Random logits whose max each row holds at three tokens: t and t + 1024 (one lane of
    the kernel, in consecutive blocks) and another anywhere."""
    generator = torch.Generator().manual_seed(seed)
    x = logits(seed)
    first = torch.randint(0, VOCAB - 1024, (ROWS,), generator=generator)
    other = torch.randint(0, VOCAB, (ROWS,), generator=generator)
    for row, tokens in enumerate(zip(first, first + 1024, other, strict=True)):
        x[row, list(tokens)] = 100.0
    return x


MIXED = rows(ROWS, seed=0, top_logprobs=3)
ALONE = [11, 2, 7]
CASES = {
    "mixed": (logits(0), MIXED),
    "bf16": (logits(1).bfloat16(), rows(ROWS, seed=1)),
    # Every token equally likely: the winner is the token of least noise, so any bit of the
    # kernel's hash that differs from exponential_noise's changes it.
    "flat": (torch.zeros(ROWS, VOCAB), rows(ROWS, seed=2)),
    # Position 13491 of seed 0 rounds token 986's uniform to 1.0, so its noise is -0.0 and
    # the tensor path's p / E is -inf there: a token that can never be drawn.
    "zero_noise": (
        logits(4),
        replace(
            rows(ROWS, seed=4),
            seeds=torch.zeros(ROWS, dtype=torch.long),
            positions=torch.full((ROWS,), 13491),
        ),
    ),
    # Greedy rows, whose max ties: the lowest of the tied tokens wins, as in torch.argmax.
    "ties": (tied(3), replace(rows(ROWS, seed=3), temperature=torch.zeros(ROWS))),
    "alone": (logits(0)[ALONE], subset(MIXED, ALONE)),
}


@pytest.fixture(scope="module")
def fused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sampled]:
    folder = tmp_path_factory.mktemp("fused")
    cases = {name: {"logits": x, "rows": vars(r)} for name, (x, r) in CASES.items()}
    torch.save(cases, folder / "cases.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder / "cases.pt"), str(folder / "drawn.pt")],
        env=env,
        check=True,
        timeout=120,
    )
    drawn = torch.load(folder / "drawn.pt")
    return {
        name: Sampled(**{"top_ids": None, "top_logprobs": None, **d}) for name, d in drawn.items()
    }


@pytest.mark.parametrize("case", ["mixed", "bf16", "flat", "zero_noise", "ties"])
def test_fused_draws_the_tensor_paths_tokens_and_logprobs(
    fused: dict[str, Sampled], case: str
) -> None:
    x, batch = CASES[case]
    expected = sample(x, batch)
    got = fused[case]
    # Every temperature, greedy included, draws the same token; no near-tie occurs in
    # these rows, so no float rounding may excuse a difference.
    assert torch.equal(got.tokens, expected.tokens)
    assert got.tokens.dtype == torch.long
    assert torch.allclose(got.logprobs, expected.logprobs, atol=1e-4)


def test_fused_top_logprobs_are_the_tensor_paths(fused: dict[str, Sampled]) -> None:
    x, batch = CASES["mixed"]
    expected = sample(x, batch)
    assert expected.top_ids is not None and fused["mixed"].top_ids is not None
    assert torch.equal(fused["mixed"].top_ids, expected.top_ids)
    assert torch.allclose(fused["mixed"].top_logprobs, expected.top_logprobs)


def test_a_rows_token_does_not_depend_on_the_rest_of_the_batch(
    fused: dict[str, Sampled],
) -> None:
    assert torch.equal(fused["alone"].tokens, fused["mixed"].tokens[ALONE])
    assert torch.equal(fused["alone"].logprobs, fused["mixed"].logprobs[ALONE])
