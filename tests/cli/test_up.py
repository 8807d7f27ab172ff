"""`crucible up`: the API and the local executor in one command, driven through the CLI."""

import subprocess
import sys
import time
from pathlib import Path

from tests.servers import local_server

RUN = """\
kind: TrainingRun
metadata: {name: hello}
spec:
  experiment: up
  command: [python, -c, "import os; print('hello from run', os.environ['CRUCIBLE_RUN_ID'])"]
"""


def test_up_runs_a_submitted_run_to_success(tmp_path: Path) -> None:
    manifest = tmp_path / "run.yaml"
    manifest.write_text(RUN.replace("[python,", f"[{sys.executable},"))
    with local_server(tmp_path, command="up") as server:
        submitted = subprocess.run(
            [sys.executable, "-m", "crucible", "submit", str(manifest)],
            env=server.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stderr
        deadline = time.monotonic() + 60
        while True:
            listed = subprocess.run(
                [sys.executable, "-m", "crucible", "runs", "ls"],
                env=server.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
            if "Succeeded" in listed:
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        log = server.home / "runs" / "1" / "attempt-1.log"
        assert log.read_text().strip() == "hello from run 1"
