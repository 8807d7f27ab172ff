"""A sweep as submitted and as shown: its spec, phase, trials and best."""

from datetime import datetime
from typing import Any

from pydantic import Field

from crucible.domain.enums import Backend, Phase
from crucible.domain.specs import SweepManifest
from crucible.schemas.common import ApiModel, PublicModel
from crucible.schemas.provenance import CodeSource


class SweepSubmit(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    manifest: SweepManifest = Field(description="A Sweep, as for kubectl.")
    backend: Backend = Field(default=Backend.local, description="Where its trials run.")
    code: CodeSource | None = Field(
        default=None, description="Where the trials' code came from; the CLI sets it."
    )
    k8s_uid: str | None = Field(
        default=None, max_length=64, description="Set by the operator for kubectl-applied sweeps."
    )


class SweepTrialPublic(PublicModel):
    number: int
    run_id: int
    run_name: str
    phase: Phase
    point: dict[str, Any] = Field(description="Its parameters' values, by config path.")
    value: float | None = Field(description="The metric's last value; none logged yet: null.")
    step: int | None = Field(description="The step of that value.")
    stopped_reason: str | None = Field(description="Why the sweep stopped it early.")


class SweepPublic(PublicModel):
    id: int
    project_id: int
    name: str
    backend: Backend
    phase: Phase = Field(description="Running, then Succeeded, Failed or Cancelled.")
    message: str
    manifest: dict[str, Any]
    spec_digest: str
    code: CodeSource | None
    metric: str
    goal: str
    budget: int = Field(description="Trials in all.")
    best_trial: int | None = Field(description="The best finished trial's number, once ended.")
    k8s_uid: str | None
    created_at: datetime
    finished_at: datetime | None
    trials: list[SweepTrialPublic] = Field(
        description="Every trial started, by number (empty in a listing)."
    )


class SweepsPublic(PublicModel):
    items: list[SweepPublic]
    next_cursor: str | None = None
