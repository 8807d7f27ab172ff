"""`crucible.init()`: what it reads from the environment, and what importing it costs."""

import subprocess
import sys
from pathlib import Path

import pytest

import crucible


def test_import_crucible_stays_cheap() -> None:
    """The CLI imports crucible; only init() may pull in torch."""
    code = "import sys, crucible; print('torch' in sys.modules, callable(crucible.init))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize(
    "command", ["datasets", "artifacts"], ids=["crucible-datasets", "crucible-artifacts"]
)
def test_the_cli_commands_that_copy_stored_files_load_no_torch(command: str) -> None:
    """`crucible datasets` and `crucible artifacts` read, check and copy files: the modules
    their commands import (the SDK's stored-file halves, the record shapes) must not bring
    torch, which would add seconds to every call."""
    modules = {
        "datasets": "crucible.cli.datasets, crucible.sdk.datasets, crucible.training.shape_of, "
        "crucible.training.records",
        "artifacts": "crucible.cli.artifacts, crucible.sdk.artifacts, crucible.artifacts.remote",
    }[command]
    code = f"import sys, crucible.cli.main, {modules}; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False"]


def test_init_reads_the_executor_environment(
    sdk_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRUCIBLE_RUN_ID", "42")
    monkeypatch.setenv("CRUCIBLE_ATTEMPT", "3")
    run = crucible.init(heartbeat_interval=0, catch_sigterm=False)
    run.finish(timeout=0)
    assert (run.id, run.attempt, run.rank, run.is_reporter) == (42, 3, 0, True)
    assert run.checkpoint_uri == (sdk_env / "runs" / "42" / "checkpoints").as_uri()
    monkeypatch.setenv("CRUCIBLE_CHECKPOINT_URI", "s3://bucket/ckpt/")
    other = crucible.init(heartbeat_interval=0, catch_sigterm=False)
    other.finish(timeout=0)
    assert other.checkpoint_uri == "s3://bucket/ckpt/"


def test_init_without_a_run_says_how_to_give_one(sdk_env: Path) -> None:
    with pytest.raises(ValueError, match="set CRUCIBLE_RUN_ID"):
        crucible.init()
