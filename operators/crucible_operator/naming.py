"""Names and labels of what the operator creates: one place, so the builders, the indexes
and the tests agree on them. The names other processes share (group, kinds, annotations,
the run label) are `crucible.domain.resources`'s, re-exported here for the operator."""

import re

from crucible.domain.resources import (
    ANNOTATION_RUN_ID,
    GROUP,
    KIND_BY_NAME,
    KINDS,
    LABEL_RUN,
    SERVED_MODEL_KIND,
    SERVED_MODEL_PLURAL,
    VERSION,
    KindInfo,
)

__all__ = [
    "ANNOTATION_RUN_ID",
    "GROUP",
    "KINDS",
    "KIND_BY_NAME",
    "LABEL_RUN",
    "SERVED_MODEL_KIND",
    "SERVED_MODEL_PLURAL",
    "VERSION",
    "KindInfo",
]

LABEL_RUN_UID = f"{GROUP}/run-uid"  # the custom resource's uid: the pod index's key
LABEL_KIND = f"{GROUP}/kind"  # train | rollout | eval
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_RANK = f"{GROUP}/rank"
LABEL_ROLE = f"{GROUP}/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "crucible-operator"

# Held on every pod of an attempt until the whole gang fits (all pods or none).
GANG_GATE = f"{GROUP}/gang"

# Trials of a hyperparameter sweep, each a TrainingRun the control plane creates (sweeps.py);
# not a run either.
SWEEP_KIND, SWEEP_PLURAL = "Sweep", "sweeps"

FINALIZER = f"{GROUP}/finalizer"
FIELD_MANAGER = "crucible-operator"

# The container that runs the workload in each pod (its status carries the image digest).
WORKLOAD_CONTAINER = "workload"
# The init container that unpacks the run's code package before it, when the spec has one.
CODE_CONTAINER = "fetch-code"

# Kubernetes expands $(VAR) in a container's command and args from its env.
TORCHRUN_PORT = 29500


def pod_name(run: str, attempt: int, rank: int) -> str:
    """Deterministic, so a restarted operator finds (never duplicates) an attempt's pods."""
    return f"{run}-a{attempt}-{rank}"


def service_name(run: str) -> str:
    """The headless Service of a multi-node run: pods are `<pod>.<run>.<namespace>.svc`."""
    return run


# Each run's own API token (run_tokens.py): its name in the control plane, by which an
# operator that restarted finds the tokens it minted (no column marks them), and the Secret
# its pods read it from, under this one key. The chart's admission policy
# (helm/crucible/templates/workload-token-policy.yaml) spells the Secret's pattern again.
RUN_TOKEN_KEY = "token"  # noqa: S105 - a key name, not a secret
RUN_TOKEN_NAME = re.compile(r"^kubernetes run (\d+)$")


def run_token_name(run_id: int) -> str:
    return f"kubernetes run {run_id}"


def run_token_secret(run_id: int) -> str:
    return f"crucible-run-{run_id}-token"
