"""`crucible up`: the API and the local executor in one command, driven through the CLI."""

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.servers import crucible, local_server

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
        submitted = crucible(server.env, "submit", str(manifest))
        assert submitted.returncode == 0, submitted.stderr
        deadline = time.monotonic() + 60
        while True:
            listed = crucible(server.env, "runs", "ls").stdout
            if "Succeeded" in listed:
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        log = server.home / "runs" / "1" / "attempt-1.log"
        assert log.read_text().strip() == "hello from run 1"


TRAPS_SIGTERM = """\
kind: TrainingRun
metadata: {name: drained}
spec:
  experiment: up
  command:
    - python
    - -c
    - |
      import signal, sys, time
      def drain(*_):
          print("checkpointed on SIGTERM", flush=True)
          sys.exit(143)
      signal.signal(signal.SIGTERM, drain)
      print("training", flush=True)
      while True:
          time.sleep(0.05)
"""


def wait_for(check: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_preempt_drains_the_run_and_streams_its_events(tmp_path: Path) -> None:
    manifest = tmp_path / "drained.yaml"
    manifest.write_text(TRAPS_SIGTERM.replace("- python\n", f"- {sys.executable}\n"))
    with local_server(tmp_path, command="up") as server:
        assert crucible(server.env, "submit", str(manifest)).returncode == 0
        headers = {"Authorization": f"Bearer {server.token}"}
        api = httpx.Client(base_url=server.url, headers=headers, timeout=30)
        wait_for(lambda: api.get("/api/v1/runs/1").json()["phase"] == "Running")
        wait_for(lambda: "training" in crucible(server.env, "runs", "logs", "1").stdout)

        preempted = crucible(server.env, "runs", "preempt", "1")
        assert preempted.returncode == 0, preempted.stderr
        # The in-process workers recover it at once: attempt 2 starts, reason preemption.
        wait_for(lambda: len(api.get("/api/v1/runs/1/attempts").json()) == 2)
        first, second = api.get("/api/v1/runs/1/attempts").json()
        assert (first["end_reason"], first["exit_code"]) == ("Preempted", 143)
        assert second["start_reason"] == "preemption"
        logs = crucible(server.env, "runs", "logs", "1", "--attempt", "1", "--follow")
        assert "checkpointed on SIGTERM" in logs.stdout
        assert crucible(server.env, "runs", "cancel", "1").returncode == 0
        again = crucible(server.env, "runs", "preempt", "1")
        assert again.returncode == 1 and "only a Running run" in again.stderr

        seen: list[str] = []
        with api.stream("GET", "/api/v1/runs/1/events/stream") as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    seen.append(line.removeprefix("event: "))
                if "AttemptEnded" in seen:
                    break
        assert seen[:4] == ["Submitted", "PhaseChanged", "AttemptStarted", "PhaseChanged"]
        assert "PreemptRequested" in seen


def test_up_stopped_by_sigterm_drains_its_jobs_before_it_exits(tmp_path: Path) -> None:
    """`kill`, a service manager or a CI timeout stops `crucible up` with SIGTERM: each job
    gets SIGTERM too, as a node drain gives it, and up exits only once the job has. It used
    to exit at once and leave the job running, reported by nobody."""
    manifest = tmp_path / "drained.yaml"
    says_its_pid = TRAPS_SIGTERM.replace("import signal,", "import os, signal,").replace(
        'print("training",', 'print("training", os.getpid(),'
    )
    manifest.write_text(says_its_pid.replace("- python\n", f"- {sys.executable}\n"))
    with local_server(tmp_path, command="up") as server:
        assert crucible(server.env, "submit", str(manifest)).returncode == 0
        log = server.home / "runs" / "1" / "attempt-1.log"
        wait_for(lambda: log.exists() and "training" in log.read_text())
        # The executor's pid of the job (its own says its PID namespace's, when isolated).
        headers = {"Authorization": f"Bearer {server.token}"}
        running = httpx.get(f"{server.url}/api/v1/runs/1", headers=headers).json()
        job = int(running["message"].rpartition("pid ")[2])

        os.kill(server.pid, signal.SIGTERM)
        wait_for(lambda: not _alive(server.pid), seconds=60)
        assert "checkpointed on SIGTERM" in log.read_text()
        assert not _alive(job), "the job outlived crucible up"


def _alive(pid: int) -> bool:
    # An exited child of this process stays a zombie until reaped: that is not alive.
    status = Path(f"/proc/{pid}/status")
    with contextlib.suppress(OSError):
        return "State:\tZ" not in status.read_text()
    return False


RESUMABLE = """\
kind: RolloutJob
metadata: {name: resume-data}
spec:
  experiment: resume
  policy: {teacher: arithmetic-solver}
  output: resume-data
  config: {task: {digits: 1}, datagen: {num_prompts: 200}}
---
kind: TrainingRun
metadata: {name: resumable}
spec:
  experiment: resume
  inputs: [{producedBy: resume-data}]
  config:
    model: {preset: tiny}
    task: {digits: 1}
    train: {steps: 500, batch_size: 8, warmup_steps: 5}
  checkpoints: {everySteps: 100000}
  recovery: {backoffSeconds: 0}
"""


# Past its own waits: the server's start, the first 50 steps, the resumed run.
@pytest.mark.timeout(780)
def test_a_preempted_training_run_resumes_from_its_sigterm_checkpoint(tmp_path: Path) -> None:
    manifest = tmp_path / "resumable.yaml"
    manifest.write_text(RESUMABLE)
    with local_server(tmp_path, command="up") as server:
        assert crucible(server.env, "submit", str(manifest)).returncode == 0
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=30
        )
        run = "/api/v1/runs/2"

        def steps_logged() -> int:
            keys = api.get(f"{run}/metrics/keys").json()["keys"]
            return max((k["last_step"] for k in keys if k["key"] == "loss"), default=0)

        wait_for(lambda: steps_logged() >= 50, seconds=120)
        assert crucible(server.env, "runs", "preempt", "2").returncode == 0
        # 500 steps leave the preemption tens of seconds to land mid-run, and the whole
        # test a few minutes on a loaded 2-core machine (scripts/test runs two workers and
        # the cluster's tests beside it: 312 s there against about 90 s alone).
        wait_for(lambda: api.get(run).json()["phase"] == "Succeeded", seconds=540)

        first, second = api.get(f"{run}/attempts").json()
        assert (first["end_reason"], first["exit_code"]) == ("Preempted", 143)
        assert (second["start_reason"], second["end_reason"]) == ("preemption", "Completed")
        saved = api.get(f"/api/v1/checkpoints/{second['resumed_from_checkpoint_id']}").json()
        assert saved["attempt_id"] == first["id"] and 50 <= saved["step"] < 500
        resumed_log = (server.home / "runs" / "2" / "attempt-2.log").read_text()
        assert f"resumed at step {saved['step']} of 500" in resumed_log
        # The loss curve continues where the checkpoint left it: each step logged once.
        series = api.get(f"{run}/metrics", params={"keys": "loss"}).json()["series"][0]
        assert series["steps"] == list(range(1, 501))
        restarted = datetime.fromisoformat(second["started_at"]).timestamp()
        by_step = dict(zip(series["steps"], series["times"], strict=True))
        assert by_step[saved["step"]] < restarted <= by_step[saved["step"] + 1]
        goodput = api.get(f"{run}/goodput").json()
        assert goodput["attempts"][1]["restart_overhead_s"] > 0
        assert 0 < goodput["goodput"] < 1
