"""Datasets, checkpoints, eval results, run inputs and the lineage graph, on the wire."""

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from crucible.domain.enums import ArtifactKind, EdgeRelation, NodeType
from crucible.domain.json_values import MAX_INT32, MAX_INT64, JsonObject
from crucible.domain.storage_uris import uri_problem
from crucible.schemas.common import ApiModel, Id, PublicModel, Step

DATASET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
DIGEST_PATTERN = r"^[a-z0-9]{2,16}:[0-9a-f]{16,80}$"

DatasetName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=DATASET_NAME_PATTERN,
        description="Dataset name: letters, digits, `.`, `_`, `-`; no `@`.",
    ),
]
ArtifactName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=DATASET_NAME_PATTERN,
        description="Artifact name: letters, digits, `.`, `_`, `-`.",
    ),
]
Digest = Annotated[
    str,
    Field(
        max_length=100,
        pattern=DIGEST_PATTERN,
        description="Content digest, `<algorithm>:<lowercase hex>`, e.g. `sha256:9f86d0...`.",
    ),
]


def _safe_uri(uri: str) -> str:
    problem = uri_problem(uri)
    if problem is not None:
        raise ValueError(f"storage URI {problem}")
    return uri


Uri = Annotated[
    str,
    Field(min_length=1, max_length=2000, description="Where the bytes live."),
    AfterValidator(_safe_uri),
]
Score = Annotated[float, Field(allow_inf_nan=False)]
# Any printable name but `"` and `\`, which would break a JSON path on SQLite.
METRIC_PATTERN = r'^[^"\\\x00-\x1f]+$'
Metric = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=METRIC_PATTERN,
        description='Metric name, e.g. `accuracy` or `pass@1`; no `"` or `\\`.',
    ),
]


class DatasetVersionCreate(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    name: DatasetName
    uri: Uri
    digest: Digest
    record_count: int | None = Field(default=None, ge=0, le=MAX_INT64)
    schema_: JsonObject = Field(
        default_factory=dict, alias="schema", description="Free-form description of a record."
    )
    produced_by_run_id: Id | None = Field(
        default=None, description="The run that wrote it; must be in the same project."
    )


class DatasetPublic(PublicModel):
    id: int
    project_id: int
    name: str
    description: str
    latest_version: int | None = Field(description="None until a version is registered.")
    created_at: datetime


class DatasetVersionPublic(PublicModel):
    id: int
    dataset_id: int
    project_id: int
    name: str = Field(description="The dataset's name.")
    version: int
    ref: str = Field(description="`name@version`, as run specs refer to it.")
    uri: str
    digest: str
    record_count: int | None
    schema_: dict[str, Any] = Field(alias="schema")
    produced_by_run_id: int | None
    created_at: datetime


class CheckpointCreate(ApiModel):
    step: Step
    uri: Uri
    digest: Digest
    size_bytes: int = Field(ge=0, le=MAX_INT64)
    attempt: int | None = Field(
        default=None, ge=1, le=MAX_INT32, description="Number of the run's attempt that wrote it."
    )
    meta: JsonObject = Field(default_factory=dict)


class CheckpointPublic(PublicModel):
    id: int
    run_id: int
    attempt_id: int | None
    step: int
    uri: str
    digest: str
    size_bytes: int
    meta: dict[str, Any]
    created_at: datetime
    deleted_at: datetime | None


class BestCheckpointPublic(CheckpointPublic):
    """A checkpoint with the eval score that made it the best."""

    metric: str
    value: float
    eval_result_id: int


class ArtifactSource(ApiModel):
    """What an artifact was made from: a checkpoint or a dataset version (same project)."""

    type: NodeType = Field(description="`checkpoint` or `dataset_version`.")
    id: Id

    @model_validator(mode="after")
    def _a_checkpoint_or_a_dataset_version(self) -> "ArtifactSource":
        if self.type not in (NodeType.checkpoint, NodeType.dataset_version):
            raise ValueError(
                f"an artifact is made from a checkpoint or a dataset_version, not a {self.type}"
            )
        return self


class ArtifactCreate(ApiModel):
    project: str = Field(min_length=1, max_length=63, description="Project name.")
    kind: ArtifactKind
    name: ArtifactName
    uri: Uri
    digest: Digest
    size_bytes: int = Field(ge=0, le=MAX_INT64)
    meta: JsonObject = Field(default_factory=dict)
    sources: list[ArtifactSource] = Field(
        default_factory=list, max_length=100, description="What it was made from."
    )
    produced_by_run_id: Id | None = Field(
        default=None, description="The run that wrote it; must be in the same project."
    )


class ArtifactPublic(PublicModel):
    id: int
    project_id: int
    kind: ArtifactKind
    name: str
    uri: str
    digest: str
    size_bytes: int
    meta: dict[str, Any]
    sources: list[ArtifactSource]
    produced_by_run_id: int | None
    created_at: datetime


class EvalResultCreate(ApiModel):
    checkpoint_id: Id
    suite: str = Field(min_length=1, max_length=63)
    scores: dict[Metric, Score] = Field(
        min_length=1, max_length=1000, description="Metric name -> finite value."
    )
    eval_run_id: Id | None = Field(
        default=None, description="The eval run that produced it; same project."
    )


class EvalResultPublic(PublicModel):
    id: int
    checkpoint_id: int
    run_id: int = Field(description="The run that wrote the checkpoint.")
    step: int = Field(description="The checkpoint's step.")
    eval_run_id: int | None
    suite: str
    scores: dict[str, float]
    created_at: datetime


class RunInputCreate(ApiModel):
    """Exactly one of a dataset version the run reads, the checkpoint it starts from, or an
    artifact it uses (a tokenizer, an exported model)."""

    dataset_version_id: Id | None = None
    checkpoint_id: Id | None = None
    artifact_id: Id | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "RunInputCreate":
        given = [self.dataset_version_id, self.checkpoint_id, self.artifact_id]
        if sum(value is not None for value in given) != 1:
            raise ValueError(
                "set exactly one of `dataset_version_id`, `checkpoint_id` and `artifact_id`"
            )
        return self


class RunInputPublic(PublicModel):
    id: int
    run_id: int
    dataset_version_id: int | None
    checkpoint_id: int | None
    artifact_id: int | None = None
    label: str = Field(
        description="`name@version`, `<run> step <N>` for a checkpoint, `<kind> <name>` for an "
        "artifact."
    )
    created_at: datetime


class NodeRef(PublicModel):
    type: NodeType
    id: int


class LineageNode(PublicModel):
    type: NodeType
    id: int
    label: str
    depth: int = Field(description="Hops from the root.")
    data: dict[str, Any]


class LineageEdgePublic(PublicModel):
    """Edges point the way data flows: from what was used to what was made."""

    source: NodeRef
    target: NodeRef
    relation: EdgeRelation


class LineageGraph(PublicModel):
    root: NodeRef
    nodes: list[LineageNode]
    edges: list[LineageEdgePublic]
    truncated: bool = Field(
        description="True when the walk hit the node cap; ask again with a smaller depth."
    )
