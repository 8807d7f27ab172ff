"""The real `mlflow` client in its own environment: the benchmark's pinned venv
(benchmarks/tracking_vs_mlflow.py installs it once into .bench/mlflow-venv, then reuses it),
with this project's packages appended after its own, so torch and transformers, too big to
install twice, are found there while everything MLflow installed wins.

The Trainer also needs accelerate, which neither environment has: it goes, without its
dependencies (all in this project's), into a folder of its own beside the venv, so the
benchmark's environment stays as the benchmark made it."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from benchmarks.tracking_vs_mlflow import MLFLOW_VENV, ensure_mlflow_venv

EXTRAS = MLFLOW_VENV.parent / "mlflow-test-extras"
EXTRA_REQUIREMENTS = ("accelerate==1.16.0",)

# Appends the given folders to the path (processing their .pth files), then runs the script.
_BOOT = (
    "import runpy, site, sys; [site.addsitedir(p) for p in sys.argv.pop(1).split(':')]; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


def _ensure_extras() -> Path:
    marker = EXTRAS / ".installed"
    if marker.exists() and marker.read_text() == "\n".join(EXTRA_REQUIREMENTS):
        return EXTRAS
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade"]
    subprocess.run([*pip, "--target", str(EXTRAS), *EXTRA_REQUIREMENTS], check=True)
    marker.write_text("\n".join(EXTRA_REQUIREMENTS))
    return EXTRAS


def run_with_mlflow(
    script: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run `script` under the MLflow venv's python, with only `env` added to an environment
    without CRUCIBLE_* or MLFLOW_* variables."""
    python = ensure_mlflow_venv(MLFLOW_VENV)
    appended = f"{sysconfig.get_paths()['purelib']}:{_ensure_extras()}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRUCIBLE_", "MLFLOW_"))}
    return subprocess.run(
        [str(python), "-c", _BOOT, appended, str(script)],
        env=base | {"PYTHONNOUSERSITE": "1"} | env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
