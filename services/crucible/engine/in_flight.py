"""A step's sampled tokens on their way to the host, read a step later.

The engine launches step t + 1 before it reads step t's tokens: the device computes the next
step while the host does this one's per-token work (stop checks, streaming, the next plan),
instead of each waiting for the other. A decode row of step t + 1 takes its input token
from step t's sampled tokens on the device, so nothing waits for the host to see it.

The copy to the host is queued right after the sampling, into pinned memory, with an event
behind it: reading waits for that event only, not for the step launched after it.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from crucible.engine.sampler import Sampled
from crucible.engine.sequence import Sequence


@dataclass(frozen=True)
class Drawn:
    """What a step drew, on the host."""

    tokens: list[int]
    logprobs: list[float]
    top: tuple[list[list[int]], list[list[float]]] | None


class InFlight:
    def __init__(self, rows: list[Sequence], sampled: Sampled) -> None:
        self.rows = rows
        self.device_tokens = sampled.tokens
        """(rows,) on the device: the inputs of these rows' next decode step."""

        parts = [sampled.tokens, sampled.logprobs]
        if sampled.top_ids is not None and sampled.top_logprobs is not None:
            parts += [sampled.top_ids, sampled.top_logprobs]
        self._ready: torch.cuda.Event | None = None
        if sampled.tokens.is_cuda:
            parts = [_to_pinned(part) for part in parts]
            self._ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._ready.record()
        self._host = parts

    def read(self) -> Drawn:
        """The step's draws, once the device has made them."""
        if self._ready is not None:
            self._ready.synchronize()
        tokens, logprobs, *top = (part.tolist() for part in self._host)
        return Drawn(tokens, logprobs, (top[0], top[1]) if top else None)


def _to_pinned(part: Tensor) -> Tensor:
    host = torch.empty(part.shape, dtype=part.dtype, pin_memory=True)
    return host.copy_(part, non_blocking=True)
