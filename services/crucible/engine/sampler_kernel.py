"""The exponential race of sampler.py for an unfiltered batch, in one pass over the logits.

The tensor path materialises the noise, the softmax and their ratio as (rows, vocab)
tensors; on a GPU that traffic can cost more than the model's decode step. Here one program
reads its row of logits once and keeps only running values: the logsumexp of the raw logits,
for the chosen token's logprob, and the best race entry so far. The race is run in log
space, argmax(logit / T - log E): the same order as argmax(softmax(logit / T) / E), since
the softmax's normaliser is shared by every token of a row. E is exponential_noise's hash,
recomputed per token in uint64, so both paths race against the same draws.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from crucible.engine import sampler_hash

# The hash's constants are spelled once, in sampler_hash.py, as the int64 torch's tensors
# hold; the kernel works in uint64, whose wrapping multiply and logical shift are the same bits.
_MIX_1 = tl.constexpr(sampler_hash.MIX_1 % 2**64)
_MIX_2 = tl.constexpr(sampler_hash.MIX_2 % 2**64)
_GOLDEN = tl.constexpr(sampler_hash.GOLDEN % 2**64)
_TWO_TO_MINUS_24 = tl.constexpr(2.0**-24)

# Tokens a program takes per step of its loop over the vocabulary, and the warps sharing
# them. One program walks a whole row, so in a small batch, where most of the GPU idles,
# a program's warps rather than the number of programs set how long a step takes.
_BLOCK = 1024
_WARPS = 16


@triton.jit
def _mix(x: tl.tensor) -> tl.tensor:
    """MurmurHash3's 64-bit finalizer, as sampler._mix, on uint64."""
    x = x ^ (x >> 33)
    x = x * _MIX_1
    x = x ^ (x >> 33)
    x = x * _MIX_2
    return x ^ (x >> 33)


@triton.jit
def _race_kernel(
    logits: tl.tensor,
    row_stride: tl.tensor,
    temperature: tl.tensor,
    seeds: tl.tensor,
    positions: tl.tensor,
    tokens: tl.tensor,
    logprobs: tl.tensor,
    vocab: tl.tensor,
    BLOCK: tl.constexpr,
) -> None:
    row = tl.program_id(0)
    # In int64: rows x vocab can pass 2**31 elements.
    row_logits = logits + row.to(tl.int64) * row_stride
    row_temperature = tl.load(temperature + row)
    # A greedy row races its raw logits with no noise, which is their argmax.
    greedy = row_temperature == 0.0
    scale = tl.where(greedy, 1.0, row_temperature)
    seed = tl.load(seeds + row).to(tl.uint64, bitcast=True)
    position = tl.load(positions + row).to(tl.uint64, bitcast=True)
    row_key = _mix(seed * _GOLDEN + position)

    lanes = tl.arange(0, BLOCK)
    # Each lane keeps its own running max, sum and best entry, so the loop needs no
    # reduction across lanes. The max starts finite so that a lane that has seen only
    # -inf (the tail, or masked tokens) rescales by exp(0), never by exp(-inf + inf).
    lane_max = tl.full([BLOCK], -3.4e38, tl.float32)
    lane_sum = tl.zeros([BLOCK], tl.float32)
    lane_best = tl.full([BLOCK], float("-inf"), tl.float32)
    lane_token = tl.zeros([BLOCK], tl.int32)
    for start in range(0, vocab, BLOCK):
        token = start + lanes
        inside = token < vocab
        logit = tl.load(row_logits + token, mask=inside, other=float("-inf")).to(tl.float32)

        new_max = tl.maximum(lane_max, logit)
        lane_sum = lane_sum * tl.exp(lane_max - new_max) + tl.exp(logit - new_max)
        lane_max = new_max

        bits = _mix(row_key ^ (token.to(tl.uint64) * _GOLDEN))
        # In float32, as exponential_noise rounds it: the top 24-bit value plus 0.5 rounds
        # to 2**24, so uniform is 1.0 and E is -0.0, and the tensor path's p / E is -inf.
        # That token never wins there, so it never wins here.
        uniform = (((bits >> 40) & 0xFFFFFF).to(tl.float32) + 0.5) * _TWO_TO_MINUS_24
        raced = logit / scale - tl.log(-tl.log(uniform))
        raced = tl.where(uniform < 1.0, raced, float("-inf"))
        entry = tl.where(greedy, logit, raced)
        # Strictly greater: of a lane's equal entries the earlier, lower token stays.
        better = entry > lane_best
        lane_best = tl.where(better, entry, lane_best)
        lane_token = tl.where(better, token, lane_token)

    best = tl.max(lane_best, axis=0)
    # Ties across lanes go to the lowest token, as torch.argmax's do.
    chosen = tl.min(tl.where(lane_best == best, lane_token, vocab), axis=0)
    row_max = tl.max(lane_max, axis=0)
    row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0)
    chosen_logit = tl.load(row_logits + chosen).to(tl.float32)
    tl.store(tokens + row, chosen.to(tl.int64))
    tl.store(logprobs + row, (chosen_logit - row_max) - tl.log(row_sum))


def race_sample(
    logits: Tensor, temperature: Tensor, seeds: Tensor, positions: Tensor
) -> tuple[Tensor, Tensor]:
    """Each row's token of (rows, vocab) `logits`, drawn as sampler.sample draws it with no
    top-k or top-p (greedy where temperature is 0), and its logprob under the untempered
    distribution."""
    logits = logits.contiguous()
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(rows, dtype=torch.float32, device=logits.device)
    _race_kernel[(rows,)](
        logits,
        logits.stride(0),
        temperature.to(torch.float32),
        seeds.to(torch.long),
        positions.to(torch.long),
        tokens,
        logprobs,
        vocab,
        BLOCK=_BLOCK,
        num_warps=_WARPS,
    )
    return tokens, logprobs
