"""The names that several processes must spell alike: Crucible's custom resources (group,
version, kinds), the annotations and tags one process writes and another reads, and the exit
code of a workload that drained. The operator, the CRD generator, the workers, the executor,
the SDK and the control plane import them from here; a name spelled twice is two names."""

from dataclasses import dataclass
from typing import Final

# Final, so its type is the literal itself, which the spec's `apiVersion` field is.
API_VERSION: Final = "crucible.dev/v1alpha1"
GROUP, _, VERSION = API_VERSION.partition("/")


@dataclass(frozen=True)
class KindInfo:
    kind: str  # TrainingRun
    plural: str  # trainingruns
    run_kind: str  # train: the control plane's RunKind
    role: str  # the pods' crucible.dev/role label


KINDS = (
    KindInfo("TrainingRun", "trainingruns", "train", "trainer"),
    KindInfo("RolloutJob", "rolloutjobs", "rollout", "generator"),
    KindInfo("EvalJob", "evaljobs", "eval", "evaluator"),
)
KIND_BY_NAME = {k.kind: k for k in KINDS}

# A checkpoint served behind a Deployment and a Service; not a run. The operator serves it,
# and the workers patch its `spec.checkpoint` when a checkpoint is promoted through the API.
SERVED_MODEL_KIND, SERVED_MODEL_PLURAL = "ServedModel", "servedmodels"

# On every pod of a run: its custom resource's name (`kubectl logs -l` selects by it).
LABEL_RUN = f"{GROUP}/run"

# On a custom resource the control plane created for a REST submission: the run's id.
ANNOTATION_RUN_ID = f"{GROUP}/run-id"

# On the manifest of a run no backend executes (an MLflow client created it): who did.
ANNOTATION_ORIGIN = f"{GROUP}/origin"

# Run tags under this prefix are the platform's own (a reproduction does not copy them).
TAG_PREFIX = f"{GROUP}/"
TAG_REPRODUCES = f"{TAG_PREFIX}reproduces"  # on a reproduction: the id of the run it repeats
TAG_EVALUATES_RUN = f"{TAG_PREFIX}evaluates-run"  # on an eval run the trigger made
TAG_CHECKPOINT = f"{TAG_PREFIX}checkpoint"  # ... and the checkpoint it evaluates

# A workload that saved its checkpoint on SIGTERM exits with this (128 + SIGTERM); the
# backends read it as "preempted", not as a failure.
PREEMPTED_EXIT_CODE = 143
