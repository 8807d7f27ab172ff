"""Turn a run's manifest into the command and environment of its processes."""

import json
import os
import sys
from pathlib import Path
from typing import Any

from crucible.schemas.runs import RunPublic


def process_count(run: RunPublic) -> int:
    spec: dict[str, Any] = run.manifest.get("spec", {})
    if run.kind == "train":
        per_node = spec.get("processesPerNode") or max(spec.get("gpusPerNode", 0), 1)
        return int(spec.get("nodes", 1)) * int(per_node)
    if run.kind == "rollout":
        return int(spec.get("replicas", 1))
    return 1


def reference_workload(run: RunPublic) -> str:
    """The module of the reference workload that runs a spec without a command."""
    spec: dict[str, Any] = run.manifest.get("spec", {})
    if run.kind == "train":
        return "crucible.workloads.train"
    if run.kind == "eval":
        return "crucible.workloads.eval"
    if (spec.get("policy") or {}).get("teacher"):
        return "crucible.workloads.datagen"
    return "crucible.workloads.rollout"


def build_command(run: RunPublic) -> list[str]:
    """The spec's command and args (default: the reference workload of the run's kind);
    several processes go through torchrun (one node)."""
    spec: dict[str, Any] = run.manifest.get("spec", {})
    command = list(spec.get("command") or [sys.executable, "-m", reference_workload(run)])
    command += list(spec.get("args", []))
    processes = process_count(run)
    if processes == 1:
        return command
    if Path(command[0]).name.startswith("python"):
        command = command[1:]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        *command,
    ]


def build_env(
    run: RunPublic,
    *,
    attempt: int,
    api_url: str,
    token: str,
    home: Path,
    gpus: list[int],
    resume_from: int | None,
    inputs: dict[str, Any] | None,
) -> dict[str, str]:
    """The process environment: the caller's, plus the run's identity, API access, config,
    spec and pinned inputs (the contract the SDK and the reference workloads read)."""
    spec: dict[str, Any] = run.manifest.get("spec", {})
    storage = (spec.get("checkpoints") or {}).get("storage")
    env = dict(os.environ)
    env.update(
        {
            "CRUCIBLE_API_URL": api_url,
            "CRUCIBLE_TOKEN": token,
            "CRUCIBLE_RUN_ID": str(run.id),
            "CRUCIBLE_ATTEMPT": str(attempt),
            "CRUCIBLE_HOME": str(home),
            "CRUCIBLE_CHECKPOINT_URI": storage
            or (home / "runs" / str(run.id) / "checkpoints").as_uri(),
            "CRUCIBLE_CONFIG": json.dumps(spec.get("config", {})),
            "CRUCIBLE_SPEC": json.dumps(spec),
            "CRUCIBLE_INPUTS": json.dumps(inputs or {"datasets": [], "checkpoint": None}),
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if resume_from is not None:
        env["CRUCIBLE_RESUME_FROM"] = str(resume_from)
    else:
        env.pop("CRUCIBLE_RESUME_FROM", None)
    for item in spec.get("env", []):
        env[item["name"]] = item.get("value", "")
    return env
