"""Uniform draws from a counter-based hash, for stochastic rounding.

A torch.Generator is an opaque object torch.compile cannot trace (the graph breaks at every
draw), each device has its own stream (CPU and GPU round differently), and a checkpoint
must carry its state. Here a draw is a pure function of (stream, counter, element index):
integer tensor ops that compile, give the same bits on every device, and resume from the
counter alone. The mixing function is Chris Wellons' `lowbias32` (hash-prospector), whose
output bits are close to independent of one another; every product is split into 16-bit
halves so no int64 intermediate overflows.
"""

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF
_LOWBIAS32 = (0x7FEB352D, 0x846CA68B)


def hash32(x: Tensor) -> Tensor:
    """int64 values in [0, 2**32) mixed to int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _LOWBIAS32[0])
    x = x ^ (x >> 15)
    x = _mul32(x, _LOWBIAS32[1])
    return x ^ (x >> 16)


def _mul32(x: Tensor, constant: int) -> Tensor:
    """x * constant mod 2**32, for x below 2**32: each partial product stays below 2**48."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def stream_key(stream: int | Tensor, counter: Tensor) -> Tensor:
    """int64 (): the key of draw number `counter` (an int64 tensor) of stream `stream` (an int
    or an int64 tensor: the same key)."""
    low = hash32((counter & MASK32) ^ (stream & MASK32))
    return hash32(low ^ ((counter >> 32) & MASK32))


def uniform(shape: torch.Size | tuple[int, ...], key: Tensor) -> Tensor:
    """float32 draws in [0, 1), one per element in row-major order, multiples of 2**-24."""
    count = 1
    for size in shape:
        count *= size
    index = torch.arange(count, device=key.device, dtype=torch.int64)
    bits = hash32(hash32((index + key) & MASK32) ^ key)
    return ((bits >> 8).to(torch.float32) * 2.0**-24).reshape(shape)
