"""The checkpoint seam: the trainer saves and resumes through a `Checkpointer`.

A checkpoint's state is a mapping of `Stateful` objects (`state_dict()` /
`load_state_dict()`), the shape torch.distributed.checkpoint (DCP) wants: DCP loads in
place, into the tensors of a template the objects produce, and then hands the filled
template back to `load_state_dict`. The run SDK implements the seam with DCP
(`crucible.workloads.jobs.runtime.RunCheckpointer`); `LocalCheckpointer` is the plain
torch.save implementation for local use and tests.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

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


class LocalCheckpointer:
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


class AsyncDCPSaver:
    """Saves a state dict with DCP's `async_save` without holding the training loop.

    staging "async": the device-to-host copy runs on a side stream into pinned buffers that
    are kept between saves (DCP's `DefaultStager`), so the loop may run forward and backward
    meanwhile; it must call `wait_staged()` before the optimizer changes the weights.
    staging "blocking": `async_save` itself copies into cached pinned buffers and returns
    once the copy is done. Either way the files are written by a background thread, and a
    second save first waits for the previous one to be written.
    """

    def __init__(self, staging: Literal["async", "blocking"] = "async") -> None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        self.staging = staging
        pinned = torch.cuda.is_available()
        self.stager = (
            DefaultStager(
                StagingOptions(
                    use_pinned_memory=pinned,
                    use_shared_memory=False,
                    use_async_staging=True,
                    use_non_blocking_copy=pinned,
                )
            )
            if staging == "async"
            else None
        )
        self.writer: Any = None
        self.pending: Any = None

    def save(self, state_dict: dict[str, Any], checkpoint_id: Path | str) -> None:
        from torch.distributed.checkpoint.filesystem import FileSystemWriter
        from torch.distributed.checkpoint.state_dict_saver import async_save

        self.wait_written()
        if self.stager is not None:
            self.pending = async_save(
                plain_tree(state_dict),
                checkpoint_id=str(checkpoint_id),
                async_stager=self.stager,
                no_dist=not dist.is_initialized(),
            )
            return
        # One writer for every save: its pinned staging buffers are cached and reused.
        if self.writer is None:
            self.writer = FileSystemWriter(checkpoint_id, cache_staged_state_dict=True)
        else:
            self.writer.reset(checkpoint_id)
        self.pending = async_save(
            state_dict, storage_writer=self.writer, no_dist=not dist.is_initialized()
        )

    def wait_staged(self) -> None:
        """Block until the last save's copy of the tensors is taken; then they may change."""
        if self.pending is not None and hasattr(self.pending, "staging_completion"):
            self.pending.staging_completion.result()

    def wait_written(self) -> None:
        """Block until the last save is on storage."""
        if self.pending is not None:
            future = getattr(self.pending, "upload_completion", self.pending)
            future.result()
            self.pending = None

    def close(self) -> None:
        self.wait_written()
        if self.stager is not None:
            self.stager.close()


def plain_tree(value: Any) -> Any:
    """`value` with every mapping a dict and every tensor a plain detached one: the staging
    copier of torch 2.11 cannot deep-copy some other containers (it fails on a class object
    met while reducing them)."""
    if isinstance(value, Mapping):
        return {k: plain_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return (
            type(value)(plain_tree(v) for v in value)
            if type(value) in (list, tuple)
            else [plain_tree(v) for v in value]
        )
    if isinstance(value, torch.Tensor):
        return value.detach()
    return value
