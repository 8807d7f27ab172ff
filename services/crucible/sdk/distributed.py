"""Who this process is under torchrun, and the few collectives the SDK needs.

Without an initialised process group every helper acts as a world of one, so the same
training script runs under `python` and under `torchrun`.
"""

import os
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    if is_distributed():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    if is_distributed():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def broadcast_from_rank0(value: T) -> T:
    """Rank 0's value on every rank (any picklable object)."""
    if not is_distributed():
        return value
    box: list[object] = [value]
    dist.broadcast_object_list(box, src=0, device=_collective_device())
    return box[0]  # type: ignore[return-value]


def any_rank(flag: bool) -> bool:
    """True on every rank when it is true on at least one; a collective every rank must call."""
    (most,) = max_over_ranks([int(flag)])
    return bool(most)


def max_over_ranks(values: list[int]) -> list[int]:
    """Each value's largest over the ranks, on every rank: one collective, however many
    values, so several things a loop must agree on travel together."""
    if not is_distributed():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.int64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]


def _collective_device() -> torch.device:
    # NCCL only moves CUDA tensors; gloo moves CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
