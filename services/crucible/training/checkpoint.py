"""The checkpoint seam: the trainer saves and resumes through a `Checkpointer`.

A checkpoint's state is a mapping of `Stateful` objects (`state_dict()` /
`load_state_dict()`), the shape torch.distributed.checkpoint (DCP) wants: DCP loads in
place, into the tensors of a template the objects produce, and then hands the filled
template back to `load_state_dict`. Two implementations: the run's
(`crucible.sdk.checkpoint.RunCheckpointer`, from `run.checkpointer()`: DCP files registered
with the control plane, what the train job uses) and `DirectoryCheckpointer` (torch.save
files in a directory, for using the library without a run, and for tests).
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist


@runtime_checkable
class Stateful(Protocol):
    """What DCP calls `Stateful`: an object that saves and restores its own state."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class Checkpointer(Protocol):
    """Every rank calls `save`, `wait` and `load`; an implementation decides which ranks
    write."""

    def save(self, step: int, state: Mapping[str, Stateful]) -> None:
        """Checkpoint `state` at `step`. It may return before the checkpoint is complete
        (an async save), but only after it has taken its copy of `state`: the caller may
        change the state right away."""
        ...

    def wait(self) -> None:
        """Block until the last `save` is complete (for a checkpointer that saves
        asynchronously: written and registered); raises if it failed."""
        ...

    def load(self, state: Mapping[str, Stateful]) -> int | None:
        """Restore the latest complete checkpoint into `state` (each object's
        `load_state_dict` is called) and return its step; None to start fresh, with
        `state` untouched."""
        ...


class DirectoryCheckpointer:
    """One `step_XXXXXXXX.pt` file per checkpoint in a directory, written atomically."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def save(self, step: int, state: Mapping[str, Stateful]) -> None:
        # Ranks hold identical replicas under DDP; one writer is enough.
        if not dist.is_initialized() or dist.get_rank() == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            final = self.directory / f"step_{step:08d}.pt"
            partial = final.with_suffix(".pt.partial")
            payload = {"step": step, "state": {k: v.state_dict() for k, v in state.items()}}
            torch.save(payload, partial)
            # A crash mid-write leaves a .partial file that load() never sees.
            os.replace(partial, final)
        if dist.is_initialized():
            dist.barrier()

    def wait(self) -> None:
        """Nothing to wait for: `save` returns once the file is in place."""

    def load(self, state: Mapping[str, Stateful]) -> int | None:
        files = sorted(self.directory.glob("step_*.pt"))
        if not files:
            return None
        payload = torch.load(files[-1], map_location="cpu", weights_only=True)
        missing = set(state) - set(payload["state"])
        if missing:
            raise ValueError(f"{files[-1]} holds no state for {', '.join(sorted(missing))}")
        for key, stateful in state.items():
            stateful.load_state_dict(payload["state"][key])
        return int(payload["step"])
