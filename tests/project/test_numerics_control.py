"""benchmarks/gpu/numerics_control.py, the command docs/numerics.md gives for separating a
format from the emulated code path, checked on the CPU with its tiny Llama."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "numerics_control.py", *args]
    return subprocess.run(
        command, cwd=REPO / "benchmarks/gpu", capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def arms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every arm of the tiny Llama, 20 steps: one run for the tests that read it."""
    out = tmp_path_factory.mktemp("numerics_control")
    finished = run("--model", "llama-tiny", "--steps", "20", "--out", str(out))
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads((out / "numerics_control.json").read_text())["numerics_control"]["arms"]


@pytest.mark.timeout(900)  # past its training subprocess's 600 s, which CI's load can need
def test_the_emulated_path_without_roundings_trains_as_the_plain_run(arms: dict[str, Any]) -> None:
    plain, path = arms["bf16"], arms["emulated-path"]
    assert len(plain["losses"]) == len(path["losses"]) == 20
    # On the CPU the plain run is float32 and the path rounds each operand to bf16: its
    # final loss was 2e-6 off the plain run's, where mxfp8's own roundings left it 9e-5 off
    # (tried with the rounding left in).
    assert plain["losses"] != path["losses"], "the emulated arm ran the plain Linear"
    assert abs(path["final_loss"] / plain["final_loss"] - 1) < 2e-5, arms
    # The roundings kept: the mxfp8 arm trains otherwise than the unrounded path.
    assert abs(arms["mxfp8"]["final_loss"] / plain["final_loss"] - 1) > 2e-5, arms


@pytest.mark.timeout(900)
def test_each_arms_weights_are_scored_on_held_out_rows_through_its_forward_and_bf16s(
    arms: dict[str, Any],
) -> None:
    plain = arms["bf16"]["held_out_loss"]
    # The plain arm's own forward is the plain model's: the two scores are one computation.
    assert plain["own_forward"] == plain["bf16_forward"]
    mxfp8 = arms["mxfp8"]["held_out_loss"]
    # The plain model loaded with mxfp8's weights scores them without the roundings.
    assert mxfp8["own_forward"] != mxfp8["bf16_forward"], mxfp8
    assert abs(mxfp8["bf16_forward"] / mxfp8["own_forward"] - 1) < 1e-3, mxfp8
    # Scored on rows it never trained on: not its last steps' training loss.
    assert all(arm["held_out_loss"]["own_forward"] != arm["final_loss"] for arm in arms.values())


def test_an_unknown_arm_is_refused_naming_it() -> None:
    refused = run("--arms", "bf16,fp9")
    assert refused.returncode == 2 and "--arms: unknown fp9" in refused.stderr
