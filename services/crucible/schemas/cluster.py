"""What a backend reports about its machines, and what the cluster page and a run's page
read back."""

from datetime import datetime
from typing import Annotated

from pydantic import Field, field_validator

from crucible.domain.enums import Backend, Phase, RunKind
from crucible.domain.json_values import MAX_INT32, MAX_INT64
from crucible.schemas.common import PLAIN_NAME, ApiModel, Id, PublicModel

MAX_NODES = 20_000
MAX_PODS = 100_000
Count = Annotated[int, Field(ge=0, le=MAX_INT32)]
KubeName = Annotated[str, Field(min_length=1, max_length=253)]
ImageRef = Annotated[str, Field(min_length=1, max_length=512, pattern=PLAIN_NAME)]


class NodeReport(ApiModel):
    name: KubeName
    ready: bool
    schedulable: bool = True
    gpus_allocatable: Count
    gpus_allocated: Count = Field(description="GPUs requested by the node's running pods.")
    gpu_product: str = Field(default="", max_length=100, description="e.g. NVIDIA-H200.")


class PodReport(ApiModel):
    """A pod, or a process group of the local executor. A pod names its run by the custom
    resource's uid (the operator does not keep run ids), a process group by the run id."""

    run_id: Id | None = None
    run_uid: str | None = Field(default=None, max_length=64)
    attempt: Annotated[int, Field(ge=1, le=MAX_INT32)]
    rank: Count = 0
    name: KubeName
    namespace: str = Field(default="", max_length=63)
    phase: str = Field(max_length=32, description="Pending, Running, Succeeded, Failed, ...")
    node: str | None = Field(default=None, max_length=253)
    gpus: Count = 0
    gpu_devices: str = Field(default="", max_length=200, description="e.g. `0,1`, if known.")
    pid: Annotated[int, Field(ge=1, le=MAX_INT64)] | None = None
    image: ImageRef | None = Field(default=None, description="The image the pod asked for.")
    image_id: ImageRef | None = Field(
        default=None, description="The digest its container runs, once the kubelet pulled it."
    )


class ClusterReport(ApiModel):
    nodes: list[NodeReport] = Field(max_length=MAX_NODES)
    pods: list[PodReport] = Field(max_length=MAX_PODS)

    @field_validator("nodes")
    @classmethod
    def _one_entry_per_node(cls, nodes: list[NodeReport]) -> list[NodeReport]:
        seen: set[str] = set()
        for node in nodes:
            if node.name in seen:
                raise ValueError(f"node {node.name!r} is reported twice; report each node once")
            seen.add(node.name)
        return nodes


class ReportReceived(PublicModel):
    cluster: str
    nodes: int
    pods: int = Field(description="Pods stored: those whose run is known.")
    unknown_runs: int = Field(description="Pods left out: their run is not registered yet.")


class NodePublic(PublicModel):
    name: str
    ready: bool
    schedulable: bool
    gpus_allocatable: int
    gpus_allocated: int
    gpu_product: str


class ClusterPublic(PublicModel):
    name: str
    reported_at: datetime
    nodes: list[NodePublic]
    gpus_allocatable: int
    gpus_allocated: int


class WaitingRun(PublicModel):
    id: int
    project_id: int
    name: str
    kind: RunKind
    backend: Backend
    phase: Phase
    reason: str
    message: str
    gpus: int
    created_at: datetime


class ClusterView(PublicModel):
    clusters: list[ClusterPublic] = Field(
        description="One per backend that reports: `kubernetes` (the operator), `local`."
    )
    waiting: list[WaitingRun] = Field(
        description="Runs the caller may see that want to run and are not running yet, oldest "
        "first."
    )


class RunPodPublic(PublicModel):
    cluster: str
    attempt: int
    rank: int
    name: str
    namespace: str
    phase: str
    node: str | None
    gpus: int
    gpu_devices: str
    pid: int | None
    reported_at: datetime
