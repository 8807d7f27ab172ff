"""Turn a run's manifest into the command and environment of its processes."""

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crucible.domain import contract
from crucible.schemas.runs import RunPublic
from crucible.settings import Settings

# What of the executor's environment user code must not get. The control plane's own
# configuration, every CRUCIBLE_* variable Settings reads (derived, so a secret added there
# is dropped here too): its database and broker URLs carry passwords, its tokens are global
# admins, and none of it is a workload's business (the SDK reads only the home, the API URL
# and the token, which build_env sets for the run). `crucible serve`'s API key likewise.
# Then the MLflow credentials of whoever started the executor: docs/mlflow.md has people
# export the admin token as MLFLOW_TRACKING_TOKEN in the shell `crucible up` runs in.
# Everything else passes through on purpose: a local run is the user's own process on the
# user's machine (PATH, virtual environments, CUDA and NCCL settings), and storage keys
# (AWS_*, ...) are what the run itself writes its checkpoints and outputs with, as a pod
# gets the storage Secret on Kubernetes.
CONTROL_PLANE_ENV = frozenset(
    {f"CRUCIBLE_{name}".upper() for name in Settings.model_fields} | {"CRUCIBLE_SERVE_API_KEY"}
)
CALLER_CREDENTIALS_ENV = frozenset(
    {"MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
)
# Under the API's URL: MLflow code in a run logs to the Crucible that started it.
MLFLOW_PATH = "/mlflow"


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
    return contract.reference_workload(run.kind, run.manifest.get("spec", {}))


def build_command(run: RunPublic) -> list[str]:
    """The spec's command and args (default: the reference workload of the run's kind);
    several processes go through torchrun (one node). A bare `python` or `python3` is the
    executor's own interpreter, as `python` in a workload image is the image's: the one
    crucible (and the run's packages) are installed in, whatever PATH finds first."""
    spec: dict[str, Any] = run.manifest.get("spec", {})
    command = list(spec.get("command") or [sys.executable, "-m", reference_workload(run)])
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
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


def working_dir(run: RunPublic) -> str | None:
    """The spec's workingDir: where the user's code is (the executor's home otherwise)."""
    directory = run.manifest.get("spec", {}).get("workingDir")
    return str(directory) if directory else None


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
    code_dir: Path | None = None,
) -> dict[str, str]:
    """The process environment: the caller's without its secrets (CONTROL_PLANE_ENV,
    CALLER_CREDENTIALS_ENV), plus the run's identity, API access with the attempt's own
    `token`, for MLflow too, config, spec and pinned inputs (the contract the SDK and the
    reference workloads read), and the unpacked code package first on PYTHONPATH. The spec's
    own `env` comes last and may point MLflow elsewhere."""
    env = inherited_env(os.environ)
    env.pop("CRUCIBLE_RESUME_FROM", None)  # only this attempt's own, if any
    env.update(
        {
            "CRUCIBLE_API_URL": api_url,
            "CRUCIBLE_TOKEN": token,
            "CRUCIBLE_HOME": str(home),
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            "MLFLOW_TRACKING_URI": api_url.rstrip("/") + MLFLOW_PATH,
            "MLFLOW_TRACKING_TOKEN": token,
        }
    )
    env.update(
        contract.workload_env(
            run_id=run.id,
            spec=run.manifest.get("spec", {}),
            attempt=attempt,
            resume_from=resume_from,
            inputs=inputs,
            checkpoint_uri=(home / "runs" / str(run.id) / "checkpoints").as_uri(),
            termination_log=str(termination_log_path(home, run.id, attempt)),
            code_dir=str(code_dir) if code_dir is not None else None,
        )
    )
    inherited = os.environ.get("PYTHONPATH")
    if code_dir is not None and inherited and env["PYTHONPATH"] == str(code_dir):
        env["PYTHONPATH"] += os.pathsep + inherited  # the executor's own, as without a package
    return env


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less what user code must not get. Names compared as Settings reads them,
    case-insensitively."""
    dropped = CONTROL_PLANE_ENV | CALLER_CREDENTIALS_ENV
    return {k: v for k, v in environ.items() if k.upper() not in dropped}


def termination_log_path(home: Path, run_id: int, attempt: int) -> Path:
    """Where the attempt's workload leaves its last sentence (contract.TERMINATION_LOG_ENV)."""
    return home / "runs" / str(run_id) / f"attempt-{attempt}.termination"


def read_termination_message(home: Path, run_id: int, attempt: int) -> str:
    """What the workload left there, cut as the kubelet cuts it; empty if nothing."""
    try:
        text = termination_log_path(home, run_id, attempt).read_text(errors="replace")
    except OSError:
        return ""
    return contract.termination_message(text)
