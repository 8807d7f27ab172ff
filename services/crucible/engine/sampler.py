"""The next token of every running sequence, from one batch of logits.

Each row has its own temperature, top-k, top-p and seed. The randomness is counter-based:
the noise for token t of a row is a hash of (the row's seed, its position, t), never a
generator's state, so a row samples the same token whatever rows share its batch and in
whatever order requests arrived. That is what makes a rollout's dataset the same for one
replica or four. Sampling is the exponential race, argmax(p / E) with E ~ Exp(1), which
draws token t with probability p_t and needs no host sync (a CUDA graph can hold it).

On a GPU a batch with no top-k or top-p runs the race in sampler_kernel.py's Triton kernel,
one pass over the logits, rather than through (rows, vocab) tensors. It races against the
same noise, so it draws the same tokens as the tensor path, but for float rounding where
two tokens all but tie.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from crucible.engine.sampler_hash import GOLDEN, LOW_31, MIX_1, MIX_2


def _mix(x: Tensor) -> Tensor:
    """MurmurHash3's 64-bit finalizer on int64 (wrapping multiplies; the masks make the
    arithmetic right shift a logical one)."""
    x = x ^ ((x >> 33) & LOW_31)
    x = x * MIX_1
    x = x ^ ((x >> 33) & LOW_31)
    x = x * MIX_2
    return x ^ ((x >> 33) & LOW_31)


def exponential_noise(seeds: Tensor, positions: Tensor, vocab_size: int) -> Tensor:
    """(rows, vocab) Exp(1) draws, a pure function of each row's (seed, position) and the
    token id."""
    row_key = _mix(seeds * GOLDEN + positions)
    token = torch.arange(vocab_size, device=seeds.device, dtype=torch.long)
    bits = _mix(row_key[:, None] ^ (token[None, :] * GOLDEN))
    # 24 random bits, centred in their interval: uniform on (0, 1), never 0. In float32 the
    # top values round (from 2**23 up, to even), and the very top one to 1.0: its E is -0.0,
    # p / E is -inf, and that token (a 2**-24 chance each) is never drawn. A bias far below
    # sampling noise, kept because changing it would change every draw; the fused kernel
    # (sampler_kernel.py) reproduces it.
    uniform = (((bits >> 40) & 0xFFFFFF).float() + 0.5) * 2.0**-24
    return -torch.log(uniform)


@dataclass(frozen=True)
class SamplingRows:
    """Per-row sampling settings for one batch, as tensors on the logits' device."""

    temperature: Tensor
    top_p: Tensor
    top_k: Tensor
    """0 where a row keeps every token."""

    seeds: Tensor
    positions: Tensor
    """Each row's index of the token being drawn (its sequence length so far)."""

    filtered: bool
    """Some row has top_p < 1 or top_k > 0: the batch takes the sorting path."""

    top_logprobs: int
    """Alternatives to return per row: the most any row asked for."""


@dataclass
class Sampled:
    tokens: Tensor
    logprobs: Tensor
    """Of each token under the untempered, unfiltered distribution: what an RL trainer's
    forward computes for the same token."""

    top_ids: Tensor | None
    top_logprobs: Tensor | None


def sample(logits: Tensor, rows: SamplingRows) -> Sampled:
    """One token per row of (rows, vocab) `logits`; greedy where temperature is 0."""
    if logits.is_cuda and not rows.filtered:
        return _sample_fused(logits, rows)
    logits = logits.float()
    logprobs_all = F.log_softmax(logits, dim=-1)
    greedy = rows.temperature == 0.0
    scaled = logits / torch.where(greedy, 1.0, rows.temperature)[:, None]
    noise = exponential_noise(rows.seeds, rows.positions, logits.size(-1))
    if rows.filtered:
        drawn = _filtered_race(scaled, noise, rows.top_p, rows.top_k)
    else:
        drawn = (F.softmax(scaled, dim=-1) / noise).argmax(dim=-1)
    tokens = torch.where(greedy, logits.argmax(dim=-1), drawn)
    top_ids = top_values = None
    if rows.top_logprobs:
        top_values, top_ids = logprobs_all.topk(rows.top_logprobs, dim=-1)
    return Sampled(
        tokens=tokens,
        logprobs=logprobs_all.gather(-1, tokens[:, None]).squeeze(-1),
        top_ids=top_ids,
        top_logprobs=top_values,
    )


def _sample_fused(logits: Tensor, rows: SamplingRows) -> Sampled:
    """sample() of an unfiltered batch on the GPU, by the Triton kernel."""
    # Imported here: a CPU-only install may have no Triton, and never reaches this line.
    from crucible.engine.sampler_kernel import race_sample

    tokens, logprobs = race_sample(logits, rows.temperature, rows.seeds, rows.positions)
    top_ids = top_values = None
    if rows.top_logprobs:
        logprobs_all = F.log_softmax(logits.float(), dim=-1)
        top_values, top_ids = logprobs_all.topk(rows.top_logprobs, dim=-1)
    return Sampled(tokens=tokens, logprobs=logprobs, top_ids=top_ids, top_logprobs=top_values)


def _filtered_race(scaled: Tensor, noise: Tensor, top_p: Tensor, top_k: Tensor) -> Tensor:
    """The race over each row's kept tokens: its top_k most likely, then of those the
    nucleus reaching top_p (the order transformers applies them in). The noise is looked
    up by token id, so a row that filters nothing draws what the unsorted path draws."""
    ordered, order = scaled.sort(dim=-1, descending=True)
    rank = torch.arange(scaled.size(-1), device=scaled.device)[None, :]
    beyond_k = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    ordered = ordered.masked_fill(beyond_k, float("-inf"))
    probs = F.softmax(ordered, dim=-1)
    # A token goes when the tokens ranked above it already reach top_p; the first stays.
    beyond_p = probs.cumsum(dim=-1) - probs >= top_p[:, None]
    probs = probs.masked_fill(beyond_p, 0.0)
    winner = (probs / noise.gather(-1, order)).argmax(dim=-1)
    return order.gather(-1, winner[:, None]).squeeze(-1)
