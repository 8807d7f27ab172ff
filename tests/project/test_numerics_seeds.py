"""benchmarks/numerics_seeds.py, the command docs/numerics.md quotes, run short: a format's
run against the same seed's float32 run, on the same eager code path."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.numerics_seeds", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)  # past its training subprocess's 600 s, which CI's load can need
def test_a_format_is_recorded_against_the_same_seeds_float32_run(tmp_path: Path) -> None:
    out = tmp_path / "seeds.json"
    # Six steps, the last three averaged: the script's record, not the study's figure (its 150
    # steps are in benchmarks/results/numerics_seeds.json), which would take CI minutes.
    finished = run(
        "--steps", "6", "--final", "3", "--seeds", "1", "--precisions", "fp32,mxfp8",
        "--out", str(out),
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    recorded = json.loads(out.read_text())["results"]
    # Seed 1 runs the precisions in the reverse order.
    assert [(r["precision"], r["seed"]) for r in recorded["runs"]] == [("mxfp8", 1), ("fp32", 1)]
    mxfp8, fp32 = recorded["runs"]
    assert len(mxfp8["losses"]) == len(fp32["losses"]) == 6
    # The same initialisation and batches: the first step's loss to rounding, then the
    # format's roundings show (not the same bits, or mxfp8 ran as float32).
    assert abs(mxfp8["losses"][0] - fp32["losses"][0]) <= 2e-3 * fp32["losses"][0]
    assert mxfp8["losses"] != fp32["losses"]
    gap = mxfp8["final_loss"] / fp32["final_loss"] - 1
    assert recorded["summary"]["mxfp8"]["vs_fp32"]["values"] == [round(gap, 5)]
    assert "vs_fp32" not in recorded["summary"]["fp32"]


def test_an_unknown_precision_or_bad_seed_is_refused_naming_it() -> None:
    unknown = run("--precisions", "fp32,mxfp9")
    assert unknown.returncode == 2 and "unknown precision 'mxfp9'" in unknown.stderr
    bad = run("--seeds", "0,one")
    assert bad.returncode == 2 and "'0,one' is not a list of integers" in bad.stderr
    short = run("--steps", "10")
    assert short.returncode == 2 and "--steps 10" in short.stderr
