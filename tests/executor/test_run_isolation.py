"""What a local run's code can reach of CRUCIBLE_HOME when the executor isolates it: its own
folder, its project's other runs and prefix; not the admin token, the database, another
project's runs or the executor's processes (issue 57, item 1).

The attacker is an editor of project B whose run's code reads the files the executor's user
can read, as `crucible up` runs every run as that user.
"""

import json
import os
import time
from pathlib import Path

import pytest

from crucible.client import CrucibleClient
from crucible.executor.gpus import GpuPool
from crucible.executor.isolation import (
    IsolationConfig,
    RunIsolation,
    choose,
    config_from,
    probe,
)
from crucible.executor.local import LocalExecutor
from crucible.schemas.runs import RunSubmit
from crucible.settings import load_settings
from tests.executor.test_run_credentials import make_executor, submit, tick_until
from tests.servers import LocalServer

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no namespaces here: {probe()}")

# Tries what an attacker would, and prints what it found as one line of JSON.
SNOOP = """
import ctypes, json, os, sys
home, sibling, stranger, executor_pid, secret = sys.argv[1:6]
own = os.environ["CRUCIBLE_RUN_ID"]
found = {}
def attempt(name, action):
    try:
        found[name] = action()
    except OSError as exc:
        found[name] = "refused: " + type(exc).__name__
attempt("token", lambda: open(os.path.join(home, "token")).read())
attempt("database", lambda: open(os.path.join(home, "crucible.db"), "rb").read(16).hex())
attempt("stranger", lambda: os.listdir(os.path.join(home, "runs", stranger)))
attempt("sibling", lambda: open(os.path.join(home, "runs", sibling, "outputs", "data.txt")).read())
attempt("secret", lambda: open(secret).read())
attempt("write_sibling", lambda: open(os.path.join(home, "runs", sibling, "x"), "w").close())
os.makedirs(os.path.join(home, "runs", own, "checkpoints"), exist_ok=True)
with open(os.path.join(home, "runs", own, "checkpoints", "step-1"), "w") as out:
    out.write("weights")
found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
found["executor_visible"] = os.path.exists(f"/proc/{executor_pid}/mem")
# Root in its namespace may still not uncover the home: the mounts are locked.
libc = ctypes.CDLL(None, use_errno=True)
found["umount"] = libc.umount2(home.encode(), 2)  # MNT_DETACH
found["home"] = sorted(os.listdir(home))
print("found=" + json.dumps(found), flush=True)
"""

WRITE_OUTPUT = """
import os, pathlib
home, run = os.environ["CRUCIBLE_HOME"], os.environ["CRUCIBLE_RUN_ID"]
out = pathlib.Path(home, "runs", run, "outputs")
out.mkdir(parents=True, exist_ok=True)
(out / "data.txt").write_text("rollouts of the project")
"""

TRAPS_SIGTERM = """
import signal, sys, time
def drain(*_):
    print("checkpointed on SIGTERM", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, drain)
print("training", flush=True)
while True:
    time.sleep(0.05)
"""

# A tool sandbox (docs/agents.md) inside an isolated run: it makes namespaces of its own, and
# a root job's tools switch to nobody.
NESTED_SANDBOX = """
from crucible.agents.sandbox import Sandbox
ran = Sandbox().run("os.path:isdir", {"s": "/"})
print("sandbox=" + ran.outcome.value + " " + repr(ran.value) + " " + ran.detail, flush=True)
"""


def finished(api: CrucibleClient, run_id: int) -> bool:
    return api.get_run(run_id).phase.value in ("Succeeded", "Failed", "Interrupted")


def test_an_isolated_run_sees_only_its_projects_files(
    live_server: LocalServer, live_api: CrucibleClient, tmp_path: Path
) -> None:
    suffix = str(time.monotonic_ns())[-8:]
    a = live_api.create_project(f"iso-a-{suffix}").name
    b = live_api.create_project(f"iso-b-{suffix}").name
    secret = tmp_path / "database-kept-elsewhere.db"
    secret.write_text("rows of every project")
    executor = LocalExecutor(
        live_api,
        api_url=live_server.url,
        home=live_server.home,
        gpus=GpuPool([]),
        grace_seconds=5,
        isolation=IsolationConfig(RunIsolation.NAMESPACES, (secret,)),
    )
    assert executor.isolated
    producer = submit(live_api, a, "producer", WRITE_OUTPUT)
    stranger = submit(live_api, b, "stranger", WRITE_OUTPUT)
    tick_until(
        executor, lambda: finished(live_api, producer.id) and finished(live_api, stranger.id)
    )
    assert (live_server.home / "runs" / str(stranger.id) / "outputs" / "data.txt").exists()

    home = str(live_server.home)
    argv = [home, str(producer.id), str(stranger.id), str(os.getpid()), str(secret)]
    snoop = submit(live_api, a, "snoop", SNOOP, *argv)
    tick_until(executor, lambda: finished(live_api, snoop.id))
    assert live_api.get_run(snoop.id).phase.value == "Succeeded", log_of(executor, snoop.id)

    found = json.loads(log_of(executor, snoop.id).split("found=", 1)[1].splitlines()[0])
    assert found["token"].startswith("refused"), found
    assert found["database"].startswith("refused"), found
    assert found["stranger"].startswith("refused"), found
    assert found["secret"] in ("", "refused: PermissionError"), found
    assert found["write_sibling"].startswith("refused"), found
    assert found["sibling"] == "rollouts of the project"
    assert not found["executor_visible"] and max(found["pids"]) < 100, found
    assert found["umount"] == -1
    assert found["home"] == ["projects", "runs"]
    checkpoint = live_server.home / "runs" / str(snoop.id) / "checkpoints" / "step-1"
    assert checkpoint.read_text() == "weights"
    assert live_server.token  # still there for the CLI, outside the run's view


def log_of(executor: LocalExecutor, run_id: int) -> str:
    return executor.log_path(run_id, 1).read_text()


def test_preempt_reaches_the_isolated_workload(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    project = live_api.create_project(f"iso-preempt-{time.monotonic_ns() % 10**8}").name
    run = submit(live_api, project, "drained", TRAPS_SIGTERM)
    executor = make_executor(live_server, live_api)
    assert executor.isolated
    tick_until(executor, lambda: "training" in log_of_maybe(executor, run.id))
    assert executor.preempt(run.id)
    tick_until(executor, lambda: live_api.get_run(run.id).phase.value != "Running")
    assert live_api.get_run(run.id).reason == "Preempted"
    assert "checkpointed on SIGTERM" in log_of(executor, run.id)
    (attempt,) = live_api.list_attempts(run.id)
    assert attempt.exit_code == 143


def test_a_tool_sandbox_works_inside_an_isolated_run(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    project = live_api.create_project(f"iso-sandbox-{time.monotonic_ns() % 10**8}").name
    run = submit(live_api, project, "agent", NESTED_SANDBOX)
    executor = make_executor(live_server, live_api)
    assert executor.isolated
    tick_until(executor, lambda: finished(live_api, run.id))
    assert "sandbox=ok True" in log_of(executor, run.id), log_of(executor, run.id)


def test_the_database_kept_outside_the_home_is_among_the_files_hidden(tmp_path: Path) -> None:
    database = tmp_path / "elsewhere" / "crucible.db"
    settings = load_settings(
        home=tmp_path / "home", database_url=f"sqlite:///{database}", run_isolation="namespaces"
    )
    config = config_from(settings)
    assert config.mode is RunIsolation.NAMESPACES
    assert set(config.hidden_files) == {
        database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")
    }
    assert config_from(load_settings(home=tmp_path / "home")).hidden_files == ()


def test_isolation_none_runs_as_before(live_server: LocalServer, live_api: CrucibleClient) -> None:
    assert not choose(IsolationConfig(RunIsolation.NONE))
    executor = LocalExecutor(
        live_api,
        api_url=live_server.url,
        home=live_server.home,
        gpus=GpuPool([]),
        isolation=IsolationConfig(RunIsolation.NONE),
    )
    project = live_api.create_project(f"iso-none-{time.monotonic_ns() % 10**8}").name
    code = "import os, sys; print('token readable', os.path.exists(sys.argv[1]))"
    run = submit(live_api, project, "plain", code, str(live_server.home / "token"))
    tick_until(executor, lambda: finished(live_api, run.id))
    assert "token readable True" in log_of(executor, run.id)


def log_of_maybe(executor: LocalExecutor, run_id: int) -> str:
    path = executor.log_path(run_id, 1)
    return path.read_text() if path.exists() else ""


TWO_RANKS = """
import os
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print(f"rank {dist.get_rank()} of {dist.get_world_size()} pid {os.getpid()}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_runs_its_processes_inside(
    live_server: LocalServer, live_api: CrucibleClient, tmp_path: Path
) -> None:
    script = tmp_path / "two_ranks.py"  # torchrun runs a file, not `-c`
    script.write_text(TWO_RANKS)
    project = live_api.create_project(f"iso-torchrun-{time.monotonic_ns() % 10**8}").name
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": "two-ranks"},
        "spec": {
            "experiment": "isolation",
            "processesPerNode": 2,
            "command": ["python", str(script)],
        },
    }
    run = live_api.submit_run(RunSubmit.model_validate({"project": project, "manifest": manifest}))
    executor = make_executor(live_server, live_api)
    tick_until(executor, lambda: finished(live_api, run.id), seconds=120)
    log = log_of(executor, run.id)
    assert live_api.get_run(run.id).phase.value == "Succeeded", log
    assert "rank 0 of 2" in log and "rank 1 of 2" in log
