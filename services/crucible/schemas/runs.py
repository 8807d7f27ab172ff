from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from crucible.domain.enums import AttemptReason, Backend, Phase, RunKind
from crucible.domain.json_values import MAX_INT32
from crucible.domain.resources import TAG_PREFIX, reserved_tag
from crucible.domain.specs import Manifest
from crucible.schemas.common import ApiModel, Id, Int32, PublicModel, Tags
from crucible.schemas.profiles import ProfileProgress, ProfileRequestPublic
from crucible.schemas.provenance import CodeSource


def _refuse_reserved(tags: Mapping[str, str]) -> Mapping[str, str]:
    for key in tags:
        if reserved_tag(key):
            raise ValueError(
                f"tag {key!r} is reserved: tags under {TAG_PREFIX!r} are set by Crucible itself"
            )
    return tags


UserTags = Annotated[Tags, AfterValidator(_refuse_reserved)]
"""A user's run tags: none of the platform's reserved ones (`resources.reserved_tag`)."""


class RunSubmit(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    manifest: Manifest = Field(description="A TrainingRun, RolloutJob or EvalJob, as for kubectl.")
    backend: Backend = Backend.local
    tags: UserTags = Field(default_factory=dict)
    code_ref: str = Field(
        default="",
        max_length=300,
        description="A short name for the code (commit, tag); default: from `code`.",
    )
    code: CodeSource | None = Field(
        default=None, description="Where the run's code came from; `crucible submit` sets it."
    )
    k8s_uid: str | None = Field(
        default=None, max_length=64, description="Set by the operator for kubectl-applied runs."
    )


class RunPublic(PublicModel):
    id: int
    project_id: int
    experiment_id: int
    name: str
    kind: RunKind
    backend: Backend
    phase: Phase
    reason: str
    message: str
    manifest: dict[str, Any]
    spec_digest: str
    code_ref: str
    code: CodeSource | None
    tags: dict[str, str]
    gpus: int
    k8s_namespace: str | None
    k8s_name: str | None
    k8s_uid: str | None
    attempt_count: int
    resolved_inputs: dict[str, Any] | None = Field(
        description="Inputs pinned before the first attempt: dataset refs and a checkpoint id."
    )
    next_attempt_reason: AttemptReason | None = Field(
        description="Set by recovery: why the next attempt starts."
    )
    resume_checkpoint_id: int | None = Field(
        description="Set by recovery: the checkpoint the next attempt resumes from."
    )
    next_attempt_at: datetime | None = Field(
        description="Set by recovery: the next attempt starts no earlier (the backoff)."
    )
    latest_step: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    def next_attempt_start(self) -> "AttemptStart":
        """What a backend starts the next attempt with: attempt 1 fresh, later ones as
        recovery decided (its reason and the checkpoint to resume from)."""
        if self.attempt_count == 0:
            return AttemptStart(reason=AttemptReason.initial)
        return AttemptStart(
            reason=self.next_attempt_reason or AttemptReason.failure_retry,
            resumed_from_checkpoint_id=self.resume_checkpoint_id,
        )


class PhaseReport(ApiModel):
    phase: Phase
    reason: str = Field(default="", max_length=64)
    message: str = Field(default="", max_length=4000)


class AttemptStart(ApiModel):
    reason: AttemptReason = AttemptReason.initial
    resumed_from_checkpoint_id: Id | None = None


class AttemptEnd(ApiModel):
    end_reason: str = Field(min_length=1, max_length=64)
    exit_code: Int32 | None = None
    message: str = Field(default="", max_length=4000)


class AttemptPublic(PublicModel):
    id: int
    run_id: int
    number: int
    start_reason: AttemptReason
    resumed_from_checkpoint_id: int | None
    end_reason: str | None
    exit_code: int | None
    message: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    heartbeat_at: datetime | None = Field(
        description="Last heartbeat from the workload; stale while running means it may hang."
    )
    image: str | None = Field(description="The image its first pod ran (Kubernetes).")
    image_id: str | None = Field(
        description="That image's digest as the kubelet resolved it (`imageID` in the pod "
        "status): what ran, whatever the tag points to now."
    )
    packages: dict[str, str] | None = Field(
        description="Package versions the workload reported when it started."
    )


class AttemptHeartbeat(ApiModel):
    attempt: int = Field(ge=1, le=MAX_INT32, description="Number of the attempt that is alive.")
    profile: ProfileProgress | None = Field(
        default=None,
        description="How the run's live profile request stands (the SDK sends it until a "
        "heartbeat carrying it is answered).",
    )


class HeartbeatAnswer(AttemptPublic):
    profile_request: ProfileRequestPublic | None = Field(
        default=None,
        description="The run's profile request still to record (`pending`, or `started` by "
        "an attempt that may have ended), for the workload to take at its next step.",
    )


class RunEventPublic(PublicModel):
    id: int
    run_id: int
    type: str
    reason: str
    message: str
    data: dict[str, Any]
    created_at: datetime


class EventFeed(PublicModel):
    """Timeline events of every run the caller may see, in id order. Pass `next_after_id`
    back as `after_id` for the next page; without `after_id` the feed starts now (no
    items, and the id to follow from)."""

    items: list[RunEventPublic]
    next_after_id: int


class InputsResolution(PublicModel):
    """Whether a run's inputs exist, and the exact versions it will read."""

    ready: bool
    phase: Phase
    message: str = Field(description="What the run waits for, or why it failed.")
    datasets: list[str] = Field(description="`name@version` of each input dataset, in order.")
    checkpoint: int | None = Field(
        description="The checkpoint it starts from (initFrom, policy, or the one evaluated)."
    )
    artifacts: dict[str, int] = Field(
        default_factory=dict,
        description="Each `artifact:<ref>` of the config -> the id of the artifact pinned for it.",
    )
