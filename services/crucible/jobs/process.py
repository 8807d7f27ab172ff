"""A job as the process's main: logging, exit codes (0 done, 2 bad config, 1 a corrupt or
missing input, 143 from `run.finish(preempted=True)`), the termination message the backend
reads, and torch's device, threads and process group.

torch and the SDK are imported inside the functions that need them, so that a bad config
fails before torch is imported.
"""

import logging
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crucible.config.parse import ConfigError
from crucible.domain import contract

if TYPE_CHECKING:
    import torch

BAD_CONFIG_EXIT_CODE = 2
INPUT_ERROR_EXIT_CODE = 1


def run_job(name: str, body: Callable[[], None]) -> None:
    """Run a job's body as the process's main; `name` is the job's as its log lines call it
    (`crucible.jobs.<name>`), and so its one-line errors.

    Logs go to stderr. A ConfigError exits 2 with its sentence; a corrupt or missing input
    (dataset or checkpoint digest mismatch) exits 1 with its message; anything else raises
    (exit 1 with a traceback). `run.finish(preempted=True)` in the body exits 143.
    """
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    # DCP warns on every save and load of a single process that it is a single process.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
    try:
        body()
    except ConfigError as exc:
        print(f"crucible.jobs.{name}: {exc}", file=sys.stderr, flush=True)
        leave_termination_message(str(exc))
        raise SystemExit(BAD_CONFIG_EXIT_CODE) from None
    except Exception as exc:
        from crucible.sdk import CheckpointError, DatasetCorrupt
        from crucible.sdk.artifacts import ArtifactCopyMismatch, ArtifactCorrupt

        corrupt = DatasetCorrupt | CheckpointError | ArtifactCopyMismatch | ArtifactCorrupt
        if isinstance(exc, corrupt):
            print(f"crucible.jobs.{name}: {exc}", file=sys.stderr, flush=True)
            leave_termination_message(str(exc))
            raise SystemExit(INPUT_ERROR_EXIT_CODE) from None
        leave_termination_message(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        teardown_torch()


def leave_termination_message(text: str) -> None:
    """Write why the job stops where the backend reads it into the attempt's end
    (contract.TERMINATION_LOG_ENV); nothing when run by hand, without that variable."""
    path = os.environ.get(contract.TERMINATION_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "w") as out:
            out.write(contract.termination_message(text))
    except OSError as exc:  # a read-only or missing place must not hide the real error
        print(f"crucible: cannot write the termination message to {path}: {exc}", file=sys.stderr)


@dataclass(frozen=True)
class TorchSetup:
    device: "torch.device"
    rank: int
    world_size: int


def setup_torch(*, distributed: bool = True) -> TorchSetup:
    """Pick the device, size the CPU thread pool and, under torchrun (WORLD_SIZE > 1) with
    `distributed`, join the process group: NCCL on CUDA, gloo on CPU.

    Without OMP_NUM_THREADS, each process gets the CPUs it may run on divided by the
    processes on the node, instead of torch's default of every core of the machine.
    """
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    if "OMP_NUM_THREADS" not in os.environ:
        affinity = getattr(os, "sched_getaffinity", None)
        cpus = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
        torch.set_num_threads(max(1, cpus // max(local_world, 1)))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if distributed and world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    return TorchSetup(device=device, rank=rank, world_size=world_size)


def teardown_torch() -> None:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
