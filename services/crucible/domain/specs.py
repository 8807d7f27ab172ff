"""Run specifications: one set of pydantic models for the REST API, `crucible submit`,
the local executor and (generated from these) the custom resource definitions.

Field names are camelCase on the wire, as Kubernetes users expect; Python code uses
snake_case attributes.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic.alias_generators import to_camel

from crucible.domain.json_values import MAX_INT32, MAX_INT64, JsonObject
from crucible.domain.resources import API_VERSION

# Pod names are `<run>-a<attempt>-<rank>`; keeping run names to 40 characters leaves room for
# attempt and rank suffixes inside Kubernetes' 63-character label/DNS limit.
MAX_RUN_NAME = 40
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Versions are 64-bit ids: at most 18 digits (every such number fits).
DATASET_REF = r"^[A-Za-z0-9][A-Za-z0-9._-]*@(latest|[0-9]{1,18})$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"
_IDENTIFIERS = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
CODE_REFERENCE = rf"^({_IDENTIFIERS}:{_IDENTIFIERS}|[A-Za-z0-9][A-Za-z0-9_.-]*)$"
"""A reward, eval suite or teacher: a built-in's name (`exact_match`) or an import path
`package.module:attribute` to code in the workload's Python (docs/workloads.md)."""
CODE_PACKAGE_REF = r"^artifact:([0-9]{1,18}|[A-Za-z0-9][A-Za-z0-9._-]{0,127})$"
"""A code package: `artifact:` and an artifact's id or name (schemas.lineage.ArtifactName)."""
# Bounds on the lists and maps a spec can grow, far beyond any real one: each item costs
# work in every component that reads the spec, and an eval suite costs a run a checkpoint.
MAX_ARGS = 1000
"""Items of `command` and of `args`."""
MAX_ENV = 1000
MAX_INPUTS = 100
MAX_EVALS = 32
"""Eval suites a checkpoint is scored by: one eval run each."""
MAX_ENTRIES = 100
"""Entries of a map of labels, annotations or node selectors, and tolerations."""


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

    id: Annotated[
        int | None, Field(ge=1, le=MAX_INT64, description="Checkpoint id in the control plane.")
    ] = None
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
    """How often checkpoints are written, how many are kept, and where."""

    every_steps: Annotated[
        int, Field(ge=1, le=MAX_INT32, description="Save every N optimizer steps.")
    ] = 100
    keep_last: Annotated[
        int,
        Field(
            ge=1,
            le=MAX_INT32,
            description="Keep the last K (the best and in-use ones are kept too).",
        ),
    ] = 3
    best: Annotated[
        str | None,
        Field(
            pattern=r"^(max|min):[A-Za-z0-9_./-]+$",
            description="Eval score that ranks checkpoints, e.g. `max:accuracy`; retention "
            "never deletes the best one.",
        ),
    ] = None
    storage: Annotated[
        str | None,
        Field(
            description="Storage URI prefix (`file://`, `s3://`, ...): checkpoints go to "
            "<prefix>/runs/<run id>/checkpoints. Default: the backend's storage."
        ),
    ] = None


SuiteName = Annotated[
    str,
    Field(
        pattern=CODE_REFERENCE,
        max_length=63,  # the length the evals table keeps
        description="Eval suite: a built-in's name (`arithmetic`) or an import path "
        "`package.module:function`; with an eval policy's `command`, the name its harness "
        "records the scores under.",
    ),
]


class EvalPolicy(SpecModel):
    """An eval suite run on every checkpoint the run writes."""

    suite: SuiteName
    gpus: Annotated[int, Field(ge=0, le=16, description="GPUs for each eval job.")] = 0
    config: Annotated[
        JsonObject, Field(description="Free-form options handed to the eval workload.")
    ] = Field(default_factory=dict)
    image: Annotated[
        str | None,
        Field(description="Image of each eval job (kubernetes); default: the run's image."),
    ] = None
    command: Annotated[
        list[str],
        Field(
            max_length=MAX_ARGS,
            description="A team's own eval harness to run on each checkpoint instead of the "
            "reference eval workload; it records its scores with the SDK.",
        ),
    ] = Field(default_factory=list)
    args: Annotated[
        list[str], Field(max_length=MAX_ARGS, description="Arguments appended to the command.")
    ] = Field(default_factory=list)

    @model_validator(mode="after")
    def _args_need_a_command(self) -> "EvalPolicy":
        if self.args and not self.command:
            raise ValueError("`args` are appended to `command`; set `command` too")
        return self


class RecoveryPolicy(SpecModel):
    """How many new attempts a run gets, and how long it waits before each.

    Interruptions (preemption, eviction, a lost node) and application failures are
    counted separately: a run is Failed when either budget is spent.
    """

    max_interruptions: Annotated[
        int,
        Field(
            ge=0, le=MAX_INT32, description="Preemptions / node losses tolerated (infrastructure)."
        ),
    ] = 20
    max_failures: Annotated[
        int,
        Field(
            ge=0, le=MAX_INT32, description="Application failures tolerated (non-zero exit, OOM)."
        ),
    ] = 1
    backoff_seconds: Annotated[
        float, Field(ge=0, le=3600, description="First retry delay; doubles up to a cap.")
    ] = 1.0


class Toleration(SpecModel):
    """A Kubernetes toleration copied to every pod of the run."""

    key: Annotated[
        str | None, Field(description="Taint key to tolerate; empty with `Exists` matches all.")
    ] = None
    operator: Annotated[
        Literal["Exists", "Equal"] | None,
        Field(description="`Exists` or `Equal` (the default in Kubernetes)."),
    ] = None
    value: Annotated[
        str | None, Field(description="Taint value to match when the operator is `Equal`.")
    ] = None
    effect: Annotated[
        Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None,
        Field(description="Taint effect to match; empty matches all effects."),
    ] = None
    toleration_seconds: Annotated[
        int | None,
        Field(
            ge=-MAX_INT64 - 1,
            le=MAX_INT64,
            description="How long a `NoExecute` taint is tolerated before eviction.",
        ),
    ] = None


class Scheduling(SpecModel):
    """Where and with what priority the run's pods are placed (passed through to pods)."""

    priority_class_name: Annotated[
        str | None, Field(description="PriorityClass of the pods (preemption order).")
    ] = None
    node_selector: Annotated[
        dict[str, str], Field(max_length=MAX_ENTRIES, description="Node labels the pods require.")
    ] = Field(default_factory=dict)
    tolerations: Annotated[
        list[Toleration],
        Field(max_length=MAX_ENTRIES, description="Tolerations added to the pods."),
    ] = Field(default_factory=list)
    scheduler_name: Annotated[
        str | None, Field(description="Scheduler for the pods; default: the cluster's default.")
    ] = None
    queue_labels: Annotated[
        dict[str, str],
        Field(
            max_length=MAX_ENTRIES,
            description="Labels copied to pods, e.g. `kueue.x-k8s.io/queue-name`.",
        ),
    ] = Field(default_factory=dict)
    pod_annotations: Annotated[
        dict[str, str],
        Field(
            max_length=MAX_ENTRIES,
            description="Annotations copied to pods, e.g. for sidecar injection, or the "
            "stage rules of a fake kubelet in tests.",
        ),
    ] = Field(default_factory=dict)


class EnvVar(SpecModel):
    """An environment variable set in the workload's container."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Variable name.")]
    value: Annotated[str, Field(description="Variable value.")] = ""


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
        list[str],
        Field(
            max_length=MAX_ARGS,
            description="Entrypoint; default: the reference workload for the kind.",
        ),
    ] = Field(default_factory=list)
    args: Annotated[
        list[str], Field(max_length=MAX_ARGS, description="Arguments appended to the command.")
    ] = Field(default_factory=list)
    working_dir: Annotated[
        str | None,
        Field(
            pattern=r"^/[^\x00-\x1f\x7f]*$",
            max_length=1024,
            description="Absolute directory the command runs in: the container's workingDir "
            "(kubernetes), the process's (local). Default: the image's (kubernetes), "
            "CRUCIBLE_HOME (local).",
        ),
    ] = None
    env: Annotated[
        list[EnvVar],
        Field(max_length=MAX_ENV, description="Extra environment variables for the workload."),
    ] = Field(default_factory=list)
    code_package: Annotated[
        str | None,
        Field(
            pattern=CODE_PACKAGE_REF,
            max_length=137,
            description="The run's own Python code, a `code` artifact (`artifact:<name>`, the "
            "newest of that name, or `artifact:<id>`; `crucible submit --package DIR` packs "
            "and sets it): checked against its digest and unpacked read-only before the "
            "workload starts, first on its PYTHONPATH, so import paths and `python -m` "
            "commands find it without an image or a shared workingDir.",
        ),
    ] = None
    config: Annotated[
        JsonObject, Field(description="Free-form configuration handed to the workload.")
    ] = Field(default_factory=dict)
    resources: Annotated[
        Resources, Field(description="CPU, memory and scratch disk requested by each pod.")
    ] = Field(default_factory=Resources)
    scheduling: Annotated[
        Scheduling, Field(description="Placement and priority passed through to the pods.")
    ] = Field(default_factory=Scheduling)


class TrainingRunSpec(WorkloadSpec):
    """A training job: `nodes` pods with `gpusPerNode` GPUs each, restarted from its
    latest checkpoint after interruptions."""

    nodes: Annotated[int, Field(ge=1, le=1024, description="Pods (nodes) per attempt.")] = 1
    gpus_per_node: Annotated[int, Field(ge=0, le=16, description="GPUs per pod.")] = 0
    processes_per_node: Annotated[
        int | None,
        Field(ge=1, le=64, description="torchrun processes per pod; default gpusPerNode or 1."),
    ] = None
    inputs: Annotated[
        list[DatasetInput],
        Field(
            max_length=MAX_INPUTS,
            description="Datasets the run reads; it waits until each one exists.",
        ),
    ] = Field(default_factory=list)
    init_from: Annotated[
        CheckpointRef | None,
        Field(description="Checkpoint whose weights initialise the run; default: from scratch."),
    ] = None
    checkpoints: Annotated[
        CheckpointPolicy, Field(description="Checkpoint interval, retention and storage.")
    ] = Field(default_factory=CheckpointPolicy)
    evals: Annotated[
        list[EvalPolicy],
        Field(max_length=MAX_EVALS, description="Eval suites run on every checkpoint."),
    ] = Field(default_factory=list)
    recovery: Annotated[
        RecoveryPolicy,
        Field(
            description="Retry budgets: interruptions (preemption, eviction, a lost node) and "
            "application failures are counted apart, and the run is Failed when either is "
            "spent; each new attempt resumes from the latest checkpoint after a backoff."
        ),
    ] = Field(default_factory=RecoveryPolicy)


class RewardSpec(SpecModel):
    """The reward function that scores each sample."""

    name: Annotated[
        str,
        Field(
            pattern=CODE_REFERENCE,
            max_length=200,
            description="Reward function: a built-in's name (`exact_match`) or an import path "
            "`package.module:function`.",
        ),
    ]
    options: Annotated[
        JsonObject, Field(description="Keyword arguments handed to the reward function.")
    ] = Field(default_factory=dict)


class SamplingSpec(SpecModel):
    """Sampling parameters for generation."""

    temperature: Annotated[
        float, Field(ge=0, le=10, description="Softmax temperature; 0 is greedy.")
    ] = 1.0
    top_p: Annotated[
        float, Field(gt=0, le=1, description="Nucleus sampling: keep this much probability mass.")
    ] = 1.0
    max_new_tokens: Annotated[
        int, Field(ge=1, le=65536, description="Most tokens generated per sample.")
    ] = 64


class PolicyRef(SpecModel):
    """The model that generates: a checkpoint, or a named built-in teacher."""

    checkpoint: Annotated[CheckpointRef | None, Field(description="Checkpoint to sample from.")] = (
        None
    )
    teacher: Annotated[
        str | None,
        Field(
            pattern=CODE_REFERENCE,
            max_length=200,
            description="Teacher: a built-in's name (`arithmetic-solver`) or an import path "
            "`package.module:function`.",
        ),
    ] = None
    options: Annotated[
        JsonObject, Field(description="Keyword arguments handed to the teacher.")
    ] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "PolicyRef":
        if (self.checkpoint is None) == (self.teacher is None):
            raise ValueError("set exactly one of `checkpoint` and `teacher`")
        if self.options and self.teacher is None:
            raise ValueError("`options` are the teacher's; a checkpoint policy takes none")
        return self


class EnvironmentSpec(SpecModel):
    """An environment: it makes the prompts and scores the samples."""

    name: Annotated[
        str,
        Field(
            pattern=CODE_REFERENCE,
            max_length=200,
            description="Environment: a built-in's name (`arithmetic`) or an import path "
            "`package.module:factory`; `factory(**options)` returns an object with "
            "`prompts(count, seed)` and `score(prompts, completions, metadata)`.",
        ),
    ]
    options: Annotated[
        JsonObject, Field(description="Keyword arguments handed to the environment's factory.")
    ] = Field(default_factory=dict)


class RolloutJobSpec(WorkloadSpec):
    """Data generation: a policy samples answers to prompts, a reward or an environment
    scores them, and the scored samples are published as a dataset."""

    policy: Annotated[
        PolicyRef, Field(description="The model that generates: a checkpoint or a teacher.")
    ]
    prompts: Annotated[
        DatasetInput | None,
        Field(
            description="Dataset of prompts, a `prompt` or a chat's `messages` per record; "
            "default: the task's problems."
        ),
    ] = None
    reward: Annotated[
        RewardSpec | None,
        Field(description="Reward that scores a checkpoint's samples, if no `environment`."),
    ] = None
    environment: Annotated[
        EnvironmentSpec | None,
        Field(
            description="Environment that makes the prompts and scores a checkpoint's "
            "samples, instead of `prompts` and `reward`."
        ),
    ] = None
    samples_per_prompt: Annotated[
        int, Field(ge=1, le=1024, description="Samples generated for each prompt.")
    ] = 1
    sampling: Annotated[
        SamplingSpec, Field(description="Temperature, top-p and length of generation.")
    ] = Field(default_factory=SamplingSpec)
    replicas: Annotated[
        int, Field(ge=1, le=1024, description="Generator pods working in parallel.")
    ] = 1
    gpus_per_replica: Annotated[int, Field(ge=0, le=16, description="GPUs per replica pod.")] = 0
    output: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
            max_length=128,
            description="Name of the dataset to publish; each job adds a new version.",
        ),
    ]

    @model_validator(mode="after")
    def _environment_alone(self) -> "RolloutJobSpec":
        if self.environment is None:
            return self
        if self.policy.teacher is not None:
            raise ValueError(
                "`environment` scores a checkpoint's samples; a teacher's answers are not "
                "scored: drop `environment`, or sample from a `checkpoint`"
            )
        given = [f"`{name}`" for name in ("prompts", "reward") if getattr(self, name) is not None]
        if given:
            raise ValueError(
                "`environment` makes the prompts and scores the samples: drop "
                + " and ".join(given)
            )
        return self


class EvalJobSpec(WorkloadSpec):
    """One eval suite scored on one checkpoint; the scores land in `status.results`."""

    checkpoint: Annotated[CheckpointRef, Field(description="The checkpoint to evaluate.")]
    suite: SuiteName
    gpus: Annotated[int, Field(ge=0, le=16, description="GPUs for the eval pod.")] = 0


class ServedModelSpec(SpecModel):
    """A checkpoint behind an OpenAI-compatible endpoint: `replicas` pods of `crucible serve`
    and a Service in front of them. A checkpoint named by its run follows that run: when a
    newer (or better) checkpoint appears, the pods roll to it, one at a time."""

    checkpoint: Annotated[
        CheckpointRef,
        Field(
            description="The checkpoint to serve: by id, or a run's `latest` or "
            "`best:<metric>` (followed as the run writes and evaluates more)."
        ),
    ]
    replicas: Annotated[int, Field(ge=0, le=64, description="Serving pods.")] = 1
    gpus: Annotated[int, Field(ge=0, le=16, description="GPUs per serving pod.")] = 0
    image: Annotated[
        str | None,
        Field(max_length=512, description="Container image; default: the operator's."),
    ] = None
    model_name: Annotated[
        str | None,
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
            max_length=128,
            description="The model name clients send; default: this resource's name.",
        ),
    ] = None
    max_running: Annotated[
        int, Field(ge=1, le=4096, description="Sequences each pod decodes at once, at most.")
    ] = 256
    resources: Annotated[Resources, Field(description="CPU and memory per pod.")] = Field(
        default_factory=Resources
    )


class ObjectMeta(SpecModel):
    name: Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=MAX_RUN_NAME)]
    namespace: Annotated[str | None, Field(pattern=DNS_LABEL, max_length=63)] = None
    labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENTRIES)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENTRIES)


class _Manifest(SpecModel):
    # A Literal takes no name: this is resources.API_VERSION (tests/api/test_names.py checks)
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


class ServedModelManifest(_Manifest):
    """Not a run: the operator serves it (docs/serving.md); it is not submitted as one."""

    kind: Literal["ServedModel"]
    spec: ServedModelSpec


MAX_SWEEP_TRIALS = 1000
MAX_SWEEP_PARAMETERS = 32
MAX_SWEEP_VALUES = 1000
"""Values of one parameter (`{values: [...]}`)."""
MAX_GRID_POINTS = 10_000
"""Combinations of a grid sweep's values: the product of their counts, checked before
anything is expanded."""


class SweepMetric(SpecModel):
    name: Annotated[
        str, Field(min_length=1, max_length=200, description="A metric key the trials log.")
    ]
    goal: Annotated[Literal["maximize", "minimize"], Field(description="Which way is better.")]
    eval_suite: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=63,  # the length the evals table keeps
            description="Judge trials by this eval suite's score `name` of their checkpoints "
            "(a suite in `run.evals`), not by a metric they log.",
        ),
    ] = None


class SweepBudget(SpecModel):
    trials: Annotated[int, Field(ge=1, le=MAX_SWEEP_TRIALS, description="Trials in all.")]
    concurrency: Annotated[int, Field(ge=1, le=1000, description="Trials running at once.")] = 1


class EarlyStopping(SpecModel):
    """ASHA: rungs at minSteps * reductionFactor^k steps below maxSteps."""

    min_steps: Annotated[int, Field(ge=1, le=MAX_INT32, description="The first rung.")]
    max_steps: Annotated[int, Field(ge=2, le=MAX_INT32, description="The trials' last step.")]
    reduction_factor: Annotated[
        int, Field(ge=2, le=100, description="1/reductionFactor of a rung's trials go on.")
    ] = 3


class SweepSpec(SpecModel):
    """A sweep: trials that are copies of `run`, each with a point of `parameters` applied
    to its config (docs/sweeps.md)."""

    method: Annotated[
        Literal["grid", "random", "tpe"],
        Field(description="How the trials' points are picked."),
    ] = "random"
    metric: Annotated[SweepMetric, Field(description="What the best trial is best at.")]
    budget: Annotated[SweepBudget, Field(description="How many trials, how many at once.")]
    early_stopping: Annotated[
        EarlyStopping | None, Field(description="ASHA on the metric; default: none.")
    ] = None
    seed: Annotated[int, Field(ge=0, le=MAX_INT64, description="Seeds random points.")] = 0
    parameters: Annotated[
        dict[str, JsonObject],
        Field(
            min_length=1,
            max_length=MAX_SWEEP_PARAMETERS,
            description="Config path -> {values: [...]} or {min, max, log}; a grid's values "
            f"make at most {MAX_GRID_POINTS:,} combinations.",
        ),
    ]
    run: Annotated[TrainingRunSpec, Field(description="The spec every trial copies.")]

    def plan_settings(self) -> dict[str, Any]:
        """Everything but `run`, keyed as `sweeps.plan.parse_plan` reads it."""
        return self.model_dump(mode="json", exclude={"run"}, exclude_none=True)


class SweepManifest(_Manifest):
    """Not a run: the control plane starts its trials as runs."""

    kind: Literal["Sweep"]
    spec: SweepSpec


Manifest = Annotated[
    TrainingRunManifest | RolloutJobManifest | EvalJobManifest, Field(discriminator="kind")
]

KIND_OF_MANIFEST = {"TrainingRun": "train", "RolloutJob": "rollout", "EvalJob": "eval"}

_manifest_adapter: TypeAdapter[Any] = TypeAdapter(Manifest)


def parse_manifest(
    document: dict[str, Any],
) -> TrainingRunManifest | RolloutJobManifest | EvalJobManifest:
    """A stored or submitted manifest as its kind's model (pydantic's ValidationError if bad)."""
    result: TrainingRunManifest | RolloutJobManifest | EvalJobManifest = (
        _manifest_adapter.validate_python(document)
    )
    return result
