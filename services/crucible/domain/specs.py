"""Run specifications: one set of pydantic models for the REST API, `crucible submit`,
the local executor and (generated from these) the custom resource definitions.

Field names are camelCase on the wire, as Kubernetes users expect; Python code uses
snake_case attributes.
"""

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

API_VERSION: Final = "crucible.dev/v1alpha1"

# Pod names are `<run>-a<attempt>-<rank>`; keeping run names to 40 characters leaves room for
# attempt and rank suffixes inside Kubernetes' 63-character label/DNS limit.
MAX_RUN_NAME = 40
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DATASET_REF = r"^[A-Za-z0-9][A-Za-z0-9._-]*@(latest|[0-9]+)$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"


class SpecModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Resources(SpecModel):
    """Per-pod (per-process in local mode) resource requests."""

    cpu: Annotated[str | None, Field(pattern=QUANTITY, description="CPU request, e.g. `8`.")] = None
    memory: Annotated[
        str | None, Field(pattern=QUANTITY, description="Memory request, e.g. `64Gi`.")
    ] = None
    ephemeral_storage: Annotated[
        str | None, Field(pattern=QUANTITY, description="Scratch disk request, e.g. `100Gi`.")
    ] = None


class DatasetInput(SpecModel):
    """A dataset the run reads: a pinned or latest version, or whatever a run produces."""

    dataset: Annotated[
        str | None,
        Field(pattern=DATASET_REF, description="`name@version` or `name@latest`."),
    ] = None
    produced_by: Annotated[
        str | None,
        Field(pattern=DNS_LABEL, description="Name of a run whose published dataset to read."),
    ] = None
    mount_as: Annotated[
        str | None, Field(description="Name the workload sees this input under.")
    ] = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "DatasetInput":
        if (self.dataset is None) == (self.produced_by is None):
            raise ValueError("set exactly one of `dataset` and `producedBy`")
        return self


class CheckpointRef(SpecModel):
    """A checkpoint by id, or a run's latest or best checkpoint by name."""

    id: Annotated[int | None, Field(ge=1, description="Checkpoint id in the control plane.")] = None
    run: Annotated[
        str | None, Field(pattern=DNS_LABEL, description="Name of the run that wrote it.")
    ] = None
    checkpoint: Annotated[
        str,
        Field(
            pattern=r"^(latest|best:[A-Za-z0-9_./-]+)$",
            description="`latest`, or `best:<metric>` (highest eval score of that metric).",
        ),
    ] = "latest"

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "CheckpointRef":
        if (self.id is None) == (self.run is None):
            raise ValueError("set exactly one of `id` and `run`")
        return self


class CheckpointPolicy(SpecModel):
    every_steps: Annotated[int, Field(ge=1, description="Save every N optimizer steps.")] = 100
    keep_last: Annotated[
        int, Field(ge=1, description="Keep the last K (the best and in-use ones are kept too).")
    ] = 3
    storage: Annotated[
        str | None,
        Field(description="Storage URI prefix (`file://`, `s3://`, ...). Default: run dir."),
    ] = None


class EvalPolicy(SpecModel):
    suite: Annotated[str, Field(min_length=1, max_length=63, description="Eval suite name.")]
    gpus: Annotated[int, Field(ge=0, le=16, description="GPUs for each eval job.")] = 0
    config: Annotated[
        dict[str, Any], Field(description="Free-form options handed to the eval workload.")
    ] = Field(default_factory=dict)


class RecoveryPolicy(SpecModel):
    max_interruptions: Annotated[
        int, Field(ge=0, description="Preemptions / node losses tolerated (infrastructure).")
    ] = 20
    max_failures: Annotated[
        int, Field(ge=0, description="Application failures tolerated (non-zero exit, OOM).")
    ] = 1
    backoff_seconds: Annotated[
        float, Field(ge=0, le=3600, description="First retry delay; doubles up to a cap.")
    ] = 1.0


class Toleration(SpecModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Scheduling(SpecModel):
    priority_class_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    scheduler_name: str | None = None
    queue_labels: Annotated[
        dict[str, str],
        Field(description="Labels copied to pods, e.g. `kueue.x-k8s.io/queue-name`."),
    ] = Field(default_factory=dict)


class EnvVar(SpecModel):
    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    value: str = ""


class WorkloadSpec(SpecModel):
    """What every kind of run has: where it belongs and what it executes."""

    experiment: Annotated[
        str, Field(pattern=DNS_LABEL, max_length=63, description="Experiment name.")
    ]
    image: Annotated[
        str | None,
        Field(description="Container image (kubernetes backend). Ignored by the local backend."),
    ] = None
    command: Annotated[
        list[str], Field(description="Entrypoint; default: the reference workload for the kind.")
    ] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    config: Annotated[
        dict[str, Any], Field(description="Free-form configuration handed to the workload.")
    ] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    scheduling: Scheduling = Field(default_factory=Scheduling)


class TrainingRunSpec(WorkloadSpec):
    nodes: Annotated[int, Field(ge=1, le=1024, description="Pods (nodes) per attempt.")] = 1
    gpus_per_node: Annotated[int, Field(ge=0, le=16, description="GPUs per pod.")] = 0
    processes_per_node: Annotated[
        int | None,
        Field(ge=1, le=64, description="torchrun processes per pod; default gpusPerNode or 1."),
    ] = None
    inputs: list[DatasetInput] = Field(default_factory=list)
    init_from: CheckpointRef | None = None
    checkpoints: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    evals: list[EvalPolicy] = Field(default_factory=list)
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)


class RewardSpec(SpecModel):
    name: Annotated[str, Field(min_length=1, description="Reward function, e.g. `exact_match`.")]
    options: dict[str, Any] = Field(default_factory=dict)


class SamplingSpec(SpecModel):
    temperature: Annotated[float, Field(ge=0, le=10)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    max_new_tokens: Annotated[int, Field(ge=1, le=65536)] = 64


class PolicyRef(SpecModel):
    """The model that generates: a checkpoint, or a named built-in teacher."""

    checkpoint: CheckpointRef | None = None
    teacher: Annotated[
        str | None, Field(description="Built-in teacher, e.g. `arithmetic-solver`.")
    ] = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "PolicyRef":
        if (self.checkpoint is None) == (self.teacher is None):
            raise ValueError("set exactly one of `checkpoint` and `teacher`")
        return self


class RolloutJobSpec(WorkloadSpec):
    policy: PolicyRef
    prompts: DatasetInput | None = None
    reward: RewardSpec | None = None
    samples_per_prompt: Annotated[int, Field(ge=1, le=1024)] = 1
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    replicas: Annotated[int, Field(ge=1, le=1024)] = 1
    gpus_per_replica: Annotated[int, Field(ge=0, le=16)] = 0
    output: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=128)]


class EvalJobSpec(WorkloadSpec):
    checkpoint: CheckpointRef
    suite: Annotated[str, Field(min_length=1, max_length=63)]
    gpus: Annotated[int, Field(ge=0, le=16)] = 0


class ObjectMeta(SpecModel):
    name: Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=MAX_RUN_NAME)]
    namespace: Annotated[str | None, Field(pattern=DNS_LABEL, max_length=63)] = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class _Manifest(SpecModel):
    api_version: Literal["crucible.dev/v1alpha1"] = API_VERSION
    metadata: ObjectMeta


class TrainingRunManifest(_Manifest):
    kind: Literal["TrainingRun"]
    spec: TrainingRunSpec


class RolloutJobManifest(_Manifest):
    kind: Literal["RolloutJob"]
    spec: RolloutJobSpec


class EvalJobManifest(_Manifest):
    kind: Literal["EvalJob"]
    spec: EvalJobSpec


Manifest = Annotated[
    TrainingRunManifest | RolloutJobManifest | EvalJobManifest, Field(discriminator="kind")
]

KIND_OF_MANIFEST = {"TrainingRun": "train", "RolloutJob": "rollout", "EvalJob": "eval"}
