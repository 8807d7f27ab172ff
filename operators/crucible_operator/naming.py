"""Names, labels and annotations of what the operator creates: one place, so the builders,
the indexes and the tests agree on them."""

from dataclasses import dataclass

GROUP = "crucible.dev"
VERSION = "v1alpha1"

LABEL_RUN = "crucible.dev/run"  # the custom resource's name
LABEL_RUN_UID = "crucible.dev/run-uid"  # its uid: the pod index's key
LABEL_KIND = "crucible.dev/kind"  # train | rollout | eval
LABEL_ATTEMPT = "crucible.dev/attempt"
LABEL_RANK = "crucible.dev/rank"
LABEL_ROLE = "crucible.dev/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "crucible-operator"

# Set on a custom resource the control plane created for a REST submission.
ANNOTATION_RUN_ID = "crucible.dev/run-id"
# Set by the workers when recovery makes the next attempt due (a wake-up for the loop).
ANNOTATION_NEXT_ATTEMPT = "crucible.dev/next-attempt"

# Held on every pod of an attempt until the whole gang fits (all pods or none).
GANG_GATE = "crucible.dev/gang"

FINALIZER = "crucible.dev/finalizer"
FIELD_MANAGER = "crucible-operator"

# The container that runs the workload in each pod (its status carries the image digest).
WORKLOAD_CONTAINER = "workload"
# The init container that unpacks the run's code package before it, when the spec has one.
CODE_CONTAINER = "fetch-code"

# Kubernetes expands $(VAR) in a container's command and args from its env.
TORCHRUN_PORT = 29500


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


def pod_name(run: str, attempt: int, rank: int) -> str:
    """Deterministic, so a restarted operator finds (never duplicates) an attempt's pods."""
    return f"{run}-a{attempt}-{rank}"


def service_name(run: str) -> str:
    """The headless Service of a multi-node run: pods are `<pod>.<run>.<namespace>.svc`."""
    return run
