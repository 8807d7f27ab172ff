"""Turn a run's manifest into the command and environment of its processes."""

import json
import os
import sys
from pathlib import Path
from typing import Any

from crucible.domain.errors import CrucibleError
from crucible.schemas.runs import RunPublic


class NoCommand(CrucibleError):
    pass


def process_count(run: RunPublic) -> int:
    spec: dict[str, Any] = run.manifest.get("spec", {})
    if run.kind == "train":
        per_node = spec.get("processesPerNode") or max(spec.get("gpusPerNode", 0), 1)
        return int(spec.get("nodes", 1)) * int(per_node)
    if run.kind == "rollout":
        return int(spec.get("replicas", 1))
    return 1


def build_command(run: RunPublic) -> list[str]:
    """The spec's command and args; several processes go through torchrun (one node)."""
    spec: dict[str, Any] = run.manifest.get("spec", {})
    if not spec.get("command"):
        # The reference workloads become the default once their entry points exist (issue 5).
        raise NoCommand(f"run {run.name!r} has no spec.command; give the command to run")
    command = list(spec["command"]) + list(spec.get("args", []))
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
) -> dict[str, str]:
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
