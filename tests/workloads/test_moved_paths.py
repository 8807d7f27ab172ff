"""The published paths the ML re-layout moved (issue 58) still work, each with a warning
naming the new one: `python -m crucible.workloads.jobs.<job>` (in specs and scripts) and
the modules user code imported (`crucible.workloads.model_handle`, `.environments`,
`.config`)."""

import importlib
import os
import subprocess
import sys

import pytest

JOBS = ["train", "rollout", "eval", "datagen", "episodes", "online_rl", "tokenizer"]


def _run(module: str) -> subprocess.CompletedProcess[str]:
    # No CRUCIBLE_CONFIG: every job refuses to start with exit 2 and a one-line reason.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
    env["CRUCIBLE_CONFIG"] = "not json"
    return subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("job", ["tokenizer", "eval"])
def test_the_old_job_path_runs_the_new_job(job: str) -> None:
    old, new = _run(f"crucible.workloads.jobs.{job}"), _run(f"crucible.jobs.{job}")
    assert new.returncode == old.returncode == 2, old.stderr
    assert "FutureWarning" in old.stderr
    assert f"python -m crucible.jobs.{job}" in old.stderr
    assert new.stderr.strip().splitlines()[-1] == old.stderr.strip().splitlines()[-1]
    assert "FutureWarning" not in new.stderr


def test_every_published_job_path_has_a_shim() -> None:
    for job in JOBS:
        assert importlib.util.find_spec(f"crucible.workloads.jobs.{job}") is not None
        assert importlib.util.find_spec(f"crucible.jobs.{job}") is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("crucible.workloads.model_handle", "crucible.rollouts.model_handle"),
        ("crucible.workloads.environments", "crucible.rollouts.environments"),
        ("crucible.workloads.config", "crucible.config.workload"),
    ],
)
def test_an_old_import_is_the_new_module(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=new):
        moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
