"""Goodput on the wire: how much of the time a run held its devices moved training forward."""

from pydantic import Field

from crucible.schemas.common import PublicModel


class AttemptGoodput(PublicModel):
    number: int
    start_reason: str
    end_reason: str | None
    duration_s: float = Field(description="Started to ended (or now, while running).")
    work_lost_s: float = Field(
        description="For an attempt that ended badly: time since its last checkpoint (or its "
        "start), which the next attempt has to redo."
    )
    restart_overhead_s: float = Field(
        description="From the previous attempt's end (interruption observed) to this start."
    )


class GoodputTotals(PublicModel):
    allocated_device_s: float = Field(
        description="Device-seconds held: attempt durations plus restart overheads, times "
        "the run's GPUs (1 for a CPU run)."
    )
    productive_device_s: float = Field(description="Allocated, less work lost and overheads.")
    work_lost_device_s: float
    restart_overhead_device_s: float
    goodput: float | None = Field(description="Productive over allocated; None before any.")


class RunGoodput(GoodputTotals):
    run_id: int
    devices: int = Field(description="GPUs of the run, or 1 for a CPU run.")
    attempts: list[AttemptGoodput]


class ExperimentGoodput(GoodputTotals):
    experiment_id: int
    runs: int = Field(description="Runs with at least one attempt.")
