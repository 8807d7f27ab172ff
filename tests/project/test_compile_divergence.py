"""benchmarks/compile_divergence.py, the command docs/numerics.md quotes, run short: an eager
and a compiled run of the small Llama, compared as the recorded results are."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.compile_divergence", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)  # past its training subprocess's 600 s, which CI's load can need
def test_an_eager_and_a_compiled_run_are_recorded_against_the_eager_one(tmp_path: Path) -> None:
    out = tmp_path / "divergence.json"
    finished = run("--steps", "30", "--moves", "0", "--out", str(out))
    assert finished.returncode == 0, finished.stderr[-3000:]
    eager, compiled = json.loads(out.read_text())["results"]["runs"]
    assert (eager["compiled"], compiled["compiled"]) == (False, True)
    assert len(eager["losses"]) == len(compiled["losses"]) == 30
    assert eager["vs_eager"] == {"30": 0.0} and eager["first_step_off"] is None
    # Compile computes the same function in another order: the same losses to rounding at
    # first (the recorded 150-step runs part at step 26), but not the same bits.
    for step, (e, c) in enumerate(zip(eager["losses"], compiled["losses"], strict=True), 1):
        assert step > 10 or abs(e - c) <= 1e-5 * e, (step, e, c)
    assert eager["losses"] != compiled["losses"], "the compiled run ran eager"


def test_a_bad_step_count_or_rate_move_is_refused_naming_it() -> None:
    short = run("--steps", "12")
    assert short.returncode == 2 and "--steps 12" in short.stderr
    bad = run("--moves", "0,tiny")
    assert bad.returncode == 2 and "'0,tiny' is not a list of numbers" in bad.stderr
