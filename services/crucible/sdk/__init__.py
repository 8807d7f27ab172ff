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

from crucible.sdk.checkpoint import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointStorageFull,
    TrainState,
)
from crucible.sdk.datasets import DatasetCorrupt, InputDataset
from crucible.sdk.preemption import PREEMPTED_EXIT_CODE
from crucible.sdk.run import Run, init

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
