"""The environment contract between a backend and a workload: the variables the SDK and the
reference workloads read. The local executor and the operator both build it here, so a
process and a pod of the same run see the same thing."""

import json
from typing import Any

# Where a workload leaves one sentence on why it stopped (Kubernetes' terminationMessagePath:
# the kubelet copies the file into the container's status; the local executor reads it).
TERMINATION_LOG_ENV = "CRUCIBLE_TERMINATION_LOG"
KUBERNETES_TERMINATION_LOG = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096  # the kubelet keeps at most this many bytes


def reference_workload(kind: str, spec: dict[str, Any]) -> str:
    """The module of the reference workload that runs a spec without a command."""
    if kind == "train":
        return "crucible.workloads.jobs.train"
    if kind == "eval":
        return "crucible.workloads.jobs.eval"
    if (spec.get("policy") or {}).get("teacher"):
        return "crucible.workloads.jobs.datagen"
    return "crucible.workloads.jobs.rollout"


def workload_env(
    *,
    run_id: int,
    spec: dict[str, Any],
    attempt: int,
    resume_from: int | None,
    inputs: dict[str, Any] | None,
    checkpoint_uri: str,
    termination_log: str,
) -> dict[str, str]:
    """The run's identity, config, whole spec, pinned inputs, checkpoint location and where
    to leave a termination message, then the spec's own `env` (which may override any of
    them, on purpose)."""
    own = (spec.get("checkpoints") or {}).get("storage")
    if own:
        # A prefix many runs may name (one spec applied twice, a team's bucket): each run
        # writes under its own id, so no save of one can clear or clash with another's.
        checkpoint_uri = f"{own.rstrip('/')}/runs/{run_id}/checkpoints"
    env = {
        "CRUCIBLE_RUN_ID": str(run_id),
        "CRUCIBLE_ATTEMPT": str(attempt),
        "CRUCIBLE_CHECKPOINT_URI": checkpoint_uri,
        "CRUCIBLE_CONFIG": json.dumps(spec.get("config", {})),
        "CRUCIBLE_SPEC": json.dumps(spec),
        "CRUCIBLE_INPUTS": json.dumps(inputs or {"datasets": [], "checkpoint": None}),
        TERMINATION_LOG_ENV: termination_log,
        "PYTHONUNBUFFERED": "1",
    }
    if resume_from is not None:
        env["CRUCIBLE_RESUME_FROM"] = str(resume_from)
    for item in spec.get("env", []):
        env[item["name"]] = item.get("value", "")
    return env


def termination_message(text: str) -> str:
    """`text` cut to what the kubelet keeps, on a character boundary."""
    data = text.strip().encode()[:MAX_TERMINATION_MESSAGE]
    return data.decode(errors="ignore")
