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

# Run tags under this prefix are the platform's own (a reproduction does not copy them):
# retention, the sweeps and the eval trigger act on them, so a user's submission may not
# set them (the platform's writers pass them apart from the user's tags).
TAG_PREFIX = f"{GROUP}/"
TAG_REPRODUCES = f"{TAG_PREFIX}reproduces"  # on a reproduction: the id of the run it repeats
TAG_EVALUATES_RUN = f"{TAG_PREFIX}evaluates-run"  # on an eval run the trigger made
TAG_CHECKPOINT = f"{TAG_PREFIX}checkpoint"  # ... and the checkpoint it evaluates
USER_SET_TAGS = frozenset({TAG_REPRODUCES})
"""Reserved tags a user's submission may carry: a reproduction's body (`GET
/runs/{id}/reproduction`, `crucible runs reproduce`) names the run it repeats, which the
control plane checks is a run of the same project."""


def reserved_tag(key: str) -> bool:
    """Whether only the platform may set the run tag `key`."""
    return key.startswith(TAG_PREFIX) and key not in USER_SET_TAGS


# A workload that saved its checkpoint on SIGTERM exits with this (128 + SIGTERM); the
# backends read it as "preempted", not as a failure.
PREEMPTED_EXIT_CODE = 143

# Online RL with generator pods: the operator sets these on a run's pods, the trainer and
# the generator processes read them.
GENERATOR_ENDPOINTS_ENV = "CRUCIBLE_GENERATOR_ENDPOINTS"
"""The directory of the attempt's generator addresses; set on every pod of a run with
generator pods."""

GENERATOR_INDEX_ENV = "CRUCIBLE_GENERATOR_INDEX"
"""On a generator pod: which generator it is, 0 up."""

POD_IP_ENV = "POD_IP"
"""On a generator pod: its address (the downward API's status.podIP)."""
