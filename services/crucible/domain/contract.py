"""The environment contract between a backend and a workload: the variables the SDK and the
reference workloads read. The local executor and the operator both build it here, so a
process and a pod of the same run see the same thing."""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crucible.domain.artifact_refs import ARTIFACT_SCHEME

# Where a workload leaves one sentence on why it stopped (Kubernetes' terminationMessagePath:
# the kubelet copies the file into the container's status; the local executor reads it).
TERMINATION_LOG_ENV = "CRUCIBLE_TERMINATION_LOG"
KUBERNETES_TERMINATION_LOG = "/dev/termination-log"
MAX_TERMINATION_MESSAGE = 4096  # the kubelet keeps at most this many bytes
# The artifact id of the run's code package (spec.codePackage as pinned), which
# `python -m crucible.fetch_code` unpacks before the workload starts.
CODE_PACKAGE_ENV = "CRUCIBLE_CODE_PACKAGE"


def default_outputs_dir(home: Path, run_id: int) -> Path:
    """Where a run writes what it publishes when CRUCIBLE_OUTPUTS_DIR is not set (the local
    executor sets none): the SDK writes there, and the API reads a local run's files there."""
    return home / "runs" / str(run_id) / "outputs"


def reference_workload(kind: str, spec: dict[str, Any]) -> str:
    """The module of the reference workload that runs a spec without a command."""
    if kind == "train":
        if "online" in (spec.get("config") or {}):
            return "crucible.jobs.online_rl"
        return "crucible.jobs.train"
    if kind == "eval":
        return "crucible.jobs.eval"
    if "episodes" in (spec.get("config") or {}):
        return "crucible.jobs.episodes"
    if (spec.get("policy") or {}).get("teacher"):
        return "crucible.jobs.datagen"
    return "crucible.jobs.rollout"


def workload_env(
    *,
    run_id: int,
    spec: dict[str, Any],
    attempt: int,
    resume_from: int | None,
    inputs: dict[str, Any] | None,
    checkpoint_uri: str,
    termination_log: str,
    code_dir: str | None = None,
) -> dict[str, str]:
    """The run's identity, config, whole spec, pinned inputs, checkpoint location and where
    to leave a termination message, then the spec's own `env` (which may override any of
    them, on purpose). With `code_dir`, where the run's code package is unpacked, that
    directory comes first on PYTHONPATH, before any PYTHONPATH the spec sets."""
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
    package = code_package_id(spec, inputs)
    if package is not None:
        env[CODE_PACKAGE_ENV] = str(package)
    for item in spec.get("env", []):
        env[item["name"]] = item.get("value", "")
    if code_dir is not None:
        env["PYTHONPATH"] = ":".join(p for p in (code_dir, env.get("PYTHONPATH")) if p)
    return env


def code_package_id(spec: Mapping[str, Any], inputs: Mapping[str, Any] | None) -> int | None:
    """The artifact id of spec.codePackage: as the control plane pinned it (a name resolves
    to the newest artifact of that name when the run's inputs are resolved), or as written
    when it names an id; None without a package, or for a name not pinned yet."""
    ref = spec.get("codePackage")
    if not ref:
        return None
    ref = str(ref).removeprefix(ARTIFACT_SCHEME)
    pinned = (inputs or {}).get("artifacts") or {}
    if ref in pinned:
        return int(pinned[ref])
    return int(ref) if ref.isascii() and ref.isdigit() else None


def termination_message(text: str) -> str:
    """`text` cut to what the kubelet keeps, on a character boundary."""
    data = text.strip().encode()[:MAX_TERMINATION_MESSAGE]
    return data.decode(errors="ignore")
