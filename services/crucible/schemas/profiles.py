"""A run's profiles on the wire: what `profile_from_step` recorded, summarised.

`ProfileSummary` is also the file the trainer writes beside each trace
(`<name>.summary.json`), so the workload, the API and the CLI share one shape.
"""

from typing import Literal

from pydantic import Field

from crucible.schemas.common import PublicModel

Phase = Literal["compute", "communication", "data_loading", "optimizer", "idle"]
PHASES: tuple[Phase, ...] = ("compute", "communication", "data_loading", "optimizer", "idle")
"""Every summary lists all five, in this order; together they make up the wall time."""


class OperatorTime(PublicModel):
    name: str = Field(description="The kernel's name (GPU) or the operator's (CPU).")
    calls: int
    total_us: float = Field(
        description="Summed duration; for a CPU operator its self time, without the "
        "operators it called, so that no time is counted twice."
    )
    share: float = Field(description="Of the time of all kernels (or all operators), 0-1.")


class PhaseTime(PublicModel):
    phase: Phase
    total_us: float
    share: float = Field(description="Of the wall time, 0-1.")


class ProfileSummary(PublicModel):
    """Where the profiled steps' time went (crucible.workloads.profile_summary explains the
    rules)."""

    timeline: Literal["gpu", "cpu"] = Field(
        description="What busy and idle are measured on: the GPU's streams, or, in a run "
        "without a GPU, the training loop's CPU thread."
    )
    wall_us: float = Field(description="From the first recorded event to the last.")
    busy_us: float = Field(description="Time in which the timeline ran something.")
    annotated: bool = Field(
        description="True when the steps carried the trainer's `crucible/` phase annotations; "
        "otherwise phases were read from operator names alone."
    )
    phases: list[PhaseTime]
    top_operators: list[OperatorTime] = Field(description="Most time first.")


class ProfilePublic(PublicModel):
    name: str = Field(description="`rank<R>-steps<A>-<B>`; the trace's URL takes it.")
    rank: int
    first_step: int
    last_step: int
    summary: ProfileSummary | None = Field(
        description="None when the profile has no summary (one recorded before summaries "
        "were written, or one whose summary could not be read)."
    )
    trace_bytes: int | None = Field(description="The gzipped trace's size; None without one.")


class RunProfiles(PublicModel):
    run_id: int
    profiles: list[ProfilePublic] = Field(description="By first step, then rank.")
    message: str = Field(description="Why there are none, and where to look instead.")
