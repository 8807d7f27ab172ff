"""The run SDK: what a workload imports to report to, and resume through, the control plane.

run = crucible.init()
start = run.load_checkpoint(state) or 0
for step in range(start, steps):
    ...
    run.log({"loss": loss}, step=step)
    if run.should_checkpoint():
        run.save_checkpoint(step, state)
        run.finish(preempted=True)  # exits 143
run.finish()
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crucible.sdk.checkpoint import (
        CheckpointCorrupt,
        CheckpointError,
        CheckpointStorageFull,
        TrainState,
    )
    from crucible.sdk.datasets import DatasetCorrupt, InputDataset
    from crucible.sdk.preemption import PREEMPTED_EXIT_CODE
    from crucible.sdk.run import Run, init

# The names load on first use: the checkpoint module brings torch, which the CLI's commands
# that only read or copy stored files (`crucible datasets`, `crucible artifacts`) must not
# wait seconds for.
_MODULE_OF = {
    "CheckpointCorrupt": "crucible.sdk.checkpoint",
    "CheckpointError": "crucible.sdk.checkpoint",
    "CheckpointStorageFull": "crucible.sdk.checkpoint",
    "TrainState": "crucible.sdk.checkpoint",
    "DatasetCorrupt": "crucible.sdk.datasets",
    "InputDataset": "crucible.sdk.datasets",
    "PREEMPTED_EXIT_CODE": "crucible.sdk.preemption",
    "Run": "crucible.sdk.run",
    "init": "crucible.sdk.run",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)


__all__ = [
    "PREEMPTED_EXIT_CODE",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointStorageFull",
    "DatasetCorrupt",
    "InputDataset",
    "Run",
    "TrainState",
    "init",
]
