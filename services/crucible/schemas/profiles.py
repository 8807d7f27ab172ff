"""A run's profiles on the wire: what `profile_from_step` recorded, summarised.

`ProfileSummary` is also the file the trainer writes beside each trace
(`<name>.summary.json`), so the workload, the API and the CLI share one shape.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from crucible.domain.json_values import MAX_INT64
from crucible.domain.profile_requests import MAX_PROFILE_STEPS, ProfileRequestState
from crucible.schemas.common import ApiModel, Id, PublicModel

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
    """Where the profiled steps' time went (crucible.training.profile_summary explains the
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


class ProfileRequestCreate(ApiModel):
    steps: Annotated[
        int,
        # The bounds are checked by the validator, so that a refusal names the value.
        Field(
            json_schema_extra={"minimum": 1, "maximum": MAX_PROFILE_STEPS},
            description="How many steps to record, from the run's next step.",
        ),
    ]

    @field_validator("steps")
    @classmethod
    def _a_few_steps(cls, steps: int) -> int:
        if not 1 <= steps <= MAX_PROFILE_STEPS:
            raise ValueError(f"profile 1 to {MAX_PROFILE_STEPS} steps, not {steps}")
        return steps


class ProfileRequestPublic(PublicModel):
    id: int
    run_id: int
    steps: int = Field(description="As requested.")
    state: ProfileRequestState
    first_step: int | None = Field(
        description="The first step recorded, once the trainer started (`started`)."
    )
    last_step: int | None = Field(
        description="The last step recorded: `first_step + steps - 1`, or the run's last step "
        "when that comes first."
    )
    requested_at: datetime
    updated_at: datetime


StepNumber = Annotated[int, Field(ge=1, le=MAX_INT64)]


class ProfileProgress(ApiModel):
    """What the run's SDK reports of a request, in a heartbeat."""

    request_id: Id
    state: Literal[ProfileRequestState.started, ProfileRequestState.done]
    first_step: StepNumber
    last_step: StepNumber

    @model_validator(mode="after")
    def _steps_in_order(self) -> "ProfileProgress":
        if self.last_step < self.first_step:
            raise ValueError(f"last_step {self.last_step} is before first_step {self.first_step}")
        return self


class RunProfiles(PublicModel):
    run_id: int
    profiles: list[ProfilePublic] = Field(description="By first step, then rank.")
    message: str = Field(description="Why there are none, and where to look instead.")
    requests: list[ProfileRequestPublic] = Field(
        default_factory=list,
        description="Profiles asked of the run while it ran (`POST /runs/{id}/profile`), "
        "newest first; a `done` one's files are among `profiles` (a local run's).",
    )
