"""The environment contract between a backend and a workload: the variables the SDK and the
reference workloads read. The local executor and the operator both build it here, so a
process and a pod of the same run see the same thing."""

import json
from typing import Any


def reference_workload(kind: str, spec: dict[str, Any]) -> str:
    """The module of the reference workload that runs a spec without a command."""
    if kind == "train":
        return "crucible.workloads.train"
    if kind == "eval":
        return "crucible.workloads.eval"
    if (spec.get("policy") or {}).get("teacher"):
        return "crucible.workloads.datagen"
    return "crucible.workloads.rollout"


def workload_env(
    *,
    run_id: int,
    spec: dict[str, Any],
    attempt: int,
    resume_from: int | None,
    inputs: dict[str, Any] | None,
    checkpoint_uri: str,
) -> dict[str, str]:
    """The run's identity, config, whole spec, pinned inputs and checkpoint location, then
    the spec's own `env` (which may override any of them, on purpose)."""
    env = {
        "CRUCIBLE_RUN_ID": str(run_id),
        "CRUCIBLE_ATTEMPT": str(attempt),
        "CRUCIBLE_CHECKPOINT_URI": (spec.get("checkpoints") or {}).get("storage") or checkpoint_uri,
        "CRUCIBLE_CONFIG": json.dumps(spec.get("config", {})),
        "CRUCIBLE_SPEC": json.dumps(spec),
        "CRUCIBLE_INPUTS": json.dumps(inputs or {"datasets": [], "checkpoint": None}),
        "PYTHONUNBUFFERED": "1",
    }
    if resume_from is not None:
        env["CRUCIBLE_RESUME_FROM"] = str(resume_from)
    for item in spec.get("env", []):
        env[item["name"]] = item.get("value", "")
    return env
