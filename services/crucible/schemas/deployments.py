"""Served checkpoints: what a backend reports about one, and what the API shows of it."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from crucible.domain.enums import Backend
from crucible.domain.json_values import MAX_INT32
from crucible.domain.specs import CheckpointRef
from crucible.schemas.common import PLAIN_NAME, PLAIN_TEXT, ApiModel, Id, Page, PublicModel

Replicas = Annotated[int, Field(ge=0, le=MAX_INT32)]


class DeploymentPhase(StrEnum):
    Pending = "Pending"
    Rolling = "Rolling"
    """Pods of a newer checkpoint are replacing the ones serving."""
    Ready = "Ready"
    Failed = "Failed"


class DeploymentReport(ApiModel):
    """How a served checkpoint stands, as its backend (the operator) sees it now."""

    uid: str | None = Field(
        default=None, max_length=64, pattern=PLAIN_NAME, description="The resource's uid."
    )
    checkpoint: CheckpointRef = Field(
        description="The checkpoint to serve, as the resource names it: `{id}`, or "
        "`{run, checkpoint: latest | best:<metric>}`; resolved in the project on every report."
    )
    replicas: Replicas = Field(description="Pods wanted.")
    ready_replicas: Replicas = Field(description="Pods ready to answer.")
    serving_checkpoint_id: Id | None = Field(
        default=None,
        description="The checkpoint the pods run now; null before any runs. An id no longer "
        "registered (its run was deleted) is stored as null.",
    )
    phase: DeploymentPhase
    message: str = Field(default="", max_length=4000, pattern=PLAIN_TEXT)
    url: str | None = Field(
        default=None,
        max_length=2000,
        pattern=PLAIN_NAME,
        description="Where it answers, e.g. its Service's in-cluster URL.",
    )


class CheckpointBrief(PublicModel):
    id: int
    run_id: int
    run_name: str
    step: int
    uri: str


class DeploymentPublic(PublicModel):
    id: int
    project: str
    backend: Backend
    name: str
    uid: str | None
    checkpoint: CheckpointRef = Field(description="The reference as the backend reported it.")
    checkpoint_id: int | None = Field(
        description="What the reference resolved to at the last report; null when it did not."
    )
    resolved: CheckpointBrief | None = Field(description="The checkpoint of `checkpoint_id`.")
    resolve_error: str | None = Field(
        description="Why the reference did not resolve at the last report; null when it did."
    )
    serving_checkpoint_id: int | None
    serving: CheckpointBrief | None = Field(
        description="The checkpoint of `serving_checkpoint_id`: what the pods run."
    )
    replicas: int
    ready_replicas: int
    phase: DeploymentPhase
    message: str
    url: str | None
    created_at: datetime
    updated_at: datetime = Field(description="When the backend last reported.")


class DeploymentsPublic(Page[DeploymentPublic]):
    """One page of deployments, newest first."""


class Promotion(ApiModel):
    """Serve another checkpoint from a deployment."""

    checkpoint_id: Id = Field(
        description="A live checkpoint of the deployment's project (not deleted by retention)."
    )


class PromotionAccepted(PublicModel):
    """A promotion recorded; a worker sets the ServedModel's `spec.checkpoint` to it, and the
    operator then rolls the pods, one at a time."""

    deployment_id: int
    checkpoint_id: int
    namespace: str = Field(description="Where the ServedModel is: the project's namespace.")
    name: str = Field(description="The ServedModel's name.")
