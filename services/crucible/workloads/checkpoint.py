"""The checkpoint seam: the trainer saves and resumes through a `Checkpointer`.

The run SDK implements it with torch.distributed.checkpoint; `LocalCheckpointer` is the
plain torch.save implementation for local use and tests.
"""

import os
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist


class Checkpointer(Protocol):
    """Every rank calls `save` and `load`; an implementation decides which ranks write."""

    def save(self, step: int, state: dict[str, Any]) -> None: ...

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """The latest complete checkpoint as (step, state), or None to start fresh."""
        ...


class LocalCheckpointer:
    """One `step_XXXXXXXX.pt` file per checkpoint in a directory, written atomically."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def save(self, step: int, state: dict[str, Any]) -> None:
        # Ranks hold identical replicas under DDP; one writer is enough.
        if not dist.is_initialized() or dist.get_rank() == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            final = self.directory / f"step_{step:08d}.pt"
            partial = final.with_suffix(".pt.partial")
            torch.save({"step": step, "state": state}, partial)
            # A crash mid-write leaves a .partial file that load() never sees.
            os.replace(partial, final)
        if dist.is_initialized():
            dist.barrier()

    def load(self) -> tuple[int, dict[str, Any]] | None:
        files = sorted(self.directory.glob("step_*.pt"))
        if not files:
            return None
        payload = torch.load(files[-1], map_location="cpu", weights_only=True)
        return int(payload["step"]), payload["state"]
