"""The local stage hands out files in tests/conftest.py's order: its longest test, alone in
its file, starts first (conftest.FIRST). pytest-xdist's `loadfile` reorders files by their
test count unless told not to, which ran that test last, beside the cluster stage's run of
the same example; scripts/test tells it not to."""

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIRST

REPO = Path(__file__).resolve().parents[2]


def local_stage_arguments() -> list[str]:
    """The arguments scripts/test gives the local stage's pytest when it picks the workers."""
    script = (REPO / "scripts/test").read_text()
    (line,) = re.findall(r"^\s*local_args=\(-n .*\)$", script, re.M)
    return line.split("(", 1)[1].rstrip(")").split()


def test_the_local_stage_keeps_conftests_file_order_over_xdists_reordering() -> None:
    arguments = local_stage_arguments()
    assert arguments[arguments.index("--dist") + 1] == "loadfile"
    assert "--no-loadscope-reorder" in arguments, arguments
    # The option is the installed xdist's: a version without it would refuse the run.
    usage = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert "--no-loadscope-reorder" in usage.stdout


def test_the_first_files_are_collected_first_whatever_the_command_line_order() -> None:
    later = "tests/api/test_downsample.py"
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", later, *FIRST],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stdout[-2000:]
    files = [line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line]
    assert files[: len(FIRST)] == list(FIRST) and later in files, files[:5]
