"""What a local run's code holds: a token of its own project, as an editor, that dies with the
attempt, and none of the executor's secrets; and the executor outlives a run deleted with its
project while it ran.

The attacker here is a viewer of project A who reads a run's log through the API
(`log-tail`), where the run printed whatever it was given.
"""

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from crucible.api.app import create_app
from crucible.client import CrucibleClient
from crucible.executor.credentials import RunCredentials, token_name
from crucible.executor.gpus import GpuPool
from crucible.executor.local import LocalExecutor
from crucible.schemas.runs import RunPublic, RunSubmit
from crucible.schemas.tenancy import TokenCreate
from crucible.settings import load_settings
from tests.conftest import ADMIN_TOKEN
from tests.servers import LocalServer, app_in_thread

# Prints its token, then keeps running until the test lets it go.
PRINT_TOKEN_AND_WAIT = """
import os, pathlib, sys, time
print("token=" + os.environ["CRUCIBLE_TOKEN"], flush=True)
release = pathlib.Path(sys.argv[1])
while not release.exists():
    time.sleep(0.05)
"""

# What MLflow's client sends for mlflow.create_experiment, set up as docs/mlflow.md says
# unless the run was given MLflow's variables.
MLFLOW_CREATE_EXPERIMENT = """
import json, os, urllib.request
env = os.environ
uri = env.get("MLFLOW_TRACKING_URI") or env["CRUCIBLE_API_URL"] + "/mlflow"
request = urllib.request.Request(
    uri + "/api/2.0/mlflow/experiments/create",
    data=json.dumps({"name": "logged-from-a-run"}).encode(),
    headers={
        "Authorization": "Bearer " + (env.get("MLFLOW_TRACKING_TOKEN") or env["CRUCIBLE_TOKEN"]),
        "Content-Type": "application/json",
    },
)
print("created", json.load(urllib.request.urlopen(request))["experiment_id"], flush=True)
"""


@pytest.fixture
def projects(live_api: CrucibleClient) -> tuple[str, str]:
    """Two fresh projects, A and B, named after the test (the server lives per module)."""
    suffix = str(time.monotonic_ns())[-8:]
    a = live_api.create_project(f"cred-a-{suffix}").name
    b = live_api.create_project(f"cred-b-{suffix}").name
    return a, b


def make_executor(server: LocalServer, api: CrucibleClient) -> LocalExecutor:
    return LocalExecutor(
        api, api_url=server.url, home=server.home, gpus=GpuPool([]), grace_seconds=5
    )


def submit(api: CrucibleClient, project: str, name: str, code: str, *args: str) -> RunPublic:
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "credentials", "command": [sys.executable, "-c", code, *args]},
    }
    return api.submit_run(RunSubmit.model_validate({"project": project, "manifest": manifest}))


def tick_until(executor: LocalExecutor, done: Callable[[], object], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for the executor"
        executor.tick()
        time.sleep(0.1)


def as_token(server: LocalServer, token: str, path: str) -> httpx.Response:
    return as_token_at(server.url, token, path)


def as_token_at(url: str, token: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers={"Authorization": f"Bearer {token}"})


def leaked_token(server: LocalServer, viewer: str, run_id: int) -> str | None:
    """The token the run printed, as a viewer of its project reads it from the log."""
    tail = as_token(server, viewer, f"/api/v1/runs/{run_id}/log-tail")
    assert tail.status_code == 200, tail.text
    found = re.search(r"token=(\S+)", tail.json()["text"])
    return found.group(1) if found else None


def test_a_runs_token_reaches_only_its_project_and_dies_with_the_run(
    live_server: LocalServer,
    live_api: CrucibleClient,
    projects: tuple[str, str],
    tmp_path: Path,
) -> None:
    a, b = projects
    viewer = live_api.create_token(TokenCreate(name="a-viewer", project=a)).token
    other = submit(live_api, b, "b-run", "print('b')")
    release = tmp_path / "release"
    run = submit(live_api, a, "leaky", PRINT_TOKEN_AND_WAIT, str(release))
    executor = make_executor(live_server, live_api)
    tick_until(executor, lambda: leaked_token(live_server, viewer, run.id))
    token = leaked_token(live_server, viewer, run.id)
    assert token is not None and token != live_server.token

    listed = as_token(live_server, token, "/api/v1/projects")
    assert listed.status_code == 200
    assert [p["name"] for p in listed.json()["items"]] == [a]
    assert as_token(live_server, token, "/api/v1/tokens").status_code == 403
    assert as_token(live_server, token, f"/api/v1/runs/{other.id}").status_code == 404
    assert as_token(live_server, token, f"/api/v1/runs?project={b}").status_code in (403, 404)
    (minted,) = [t for t in live_api.list_tokens().items if t.name == token_name(run.id, 1)]
    assert (minted.role.value, minted.expires_at is not None) == ("editor", True)

    release.touch()
    tick_until(executor, lambda: live_api.get_run(run.id).phase.value == "Succeeded")
    assert as_token(live_server, token, "/api/v1/projects").status_code == 401


def test_the_run_gets_none_of_the_executors_secrets(
    live_server: LocalServer,
    live_api: CrucibleClient,
    projects: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What `crucible up` or an operator's shell may hold, and what must pass through.
    secrets = {
        "CRUCIBLE_TOKEN": live_server.token,
        "CRUCIBLE_ADMIN_TOKEN": "cru_admin-secret-of-the-server",
        "crucible_admin_token": "cru_admin-secret-lower-case",
        "CRUCIBLE_DATABASE_URL": "postgresql://crucible:db-password@db/crucible",
        "CRUCIBLE_BROKER_URL": "redis://:broker-password@redis:6379/0",
        "CRUCIBLE_SERVE_API_KEY": "serve-key-secret",
        "MLFLOW_TRACKING_TOKEN": live_server.token,
        "MLFLOW_TRACKING_USERNAME": "default",
        "MLFLOW_TRACKING_PASSWORD": live_server.token,
    }
    kept = {"AWS_ACCESS_KEY_ID": "storage-key-the-run-writes-with", "MY_SETTING": "mine"}
    for name, value in (secrets | kept).items():
        monkeypatch.setenv(name, value)
    code = "import json, os; print('env=' + json.dumps(dict(os.environ)), flush=True)"
    run = submit(live_api, projects[0], "env-dump", code)
    executor = make_executor(live_server, live_api)
    tick_until(executor, lambda: live_api.get_run(run.id).phase.value == "Succeeded")
    log = executor.log_path(run.id, 1).read_text()
    env = json.loads(log.split("env=", 1)[1].splitlines()[0])
    for value in secrets.values():
        assert value not in json.dumps(env)
    assert {k: env.get(k) for k in kept} == kept
    assert env["CRUCIBLE_TOKEN"] == env["MLFLOW_TRACKING_TOKEN"]
    assert env["MLFLOW_TRACKING_URI"] == live_server.url + "/mlflow"
    assert "MLFLOW_TRACKING_USERNAME" not in env


def test_mlflow_calls_from_a_run_land_in_its_project(
    live_server: LocalServer, live_api: CrucibleClient, projects: tuple[str, str]
) -> None:
    a, _ = projects
    run = submit(live_api, a, "mlflow-client", MLFLOW_CREATE_EXPERIMENT)
    executor = make_executor(live_server, live_api)
    tick_until(executor, lambda: live_api.get_run(run.id).phase.value == "Succeeded")
    assert "created" in executor.log_path(run.id, 1).read_text()
    assert "logged-from-a-run" in [e.name for e in live_api.list_experiments(a).items]
    assert "logged-from-a-run" not in [e.name for e in live_api.list_experiments("default").items]


def test_tokens_a_dead_executor_left_are_revoked_by_the_next(
    live_server: LocalServer, live_api: CrucibleClient, projects: tuple[str, str], tmp_path: Path
) -> None:
    run = submit(live_api, projects[0], "orphaned", PRINT_TOKEN_AND_WAIT, str(tmp_path / "never"))
    crashed = make_executor(live_server, live_api)
    tick_until(crashed, lambda: live_api.get_run(run.id).phase.value == "Running")
    name = token_name(run.id, 1)
    (left,) = [t for t in live_api.list_tokens().items if t.name == name]
    assert left.revoked_at is None
    make_executor(live_server, live_api).adopt_orphans()
    (left,) = [t for t in live_api.list_tokens().items if t.name == name]
    assert left.revoked_at is not None
    crashed.shutdown()


def test_a_server_that_caps_token_lifetimes_gets_the_longest_it_allows(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path / "home",
        # Its own database: CRUCIBLE_DATABASE_URL from the test stack's environment names the
        # shared Postgres, which no migration has prepared for this app.
        database_url=f"sqlite:///{tmp_path / 'crucible.db'}",
        admin_token=ADMIN_TOKEN,
        broker_url=None,
        token_max_lifetime_days=1,
    )
    with app_in_thread(create_app(settings)) as url, CrucibleClient(url, ADMIN_TOKEN) as api:
        run = submit(api, api.create_project("capped").name, "capped", "print()")
        credentials = RunCredentials(api, api_url=url)
        token = credentials.mint(run, 1)
        (minted,) = [t for t in api.list_tokens().items if t.id == token.id]
        assert minted.expires_at is not None
        assert minted.expires_at <= datetime.now(UTC) + timedelta(days=1)
        assert as_token_at(url, token.secret, "/api/v1/projects").status_code == 200
        credentials.revoke(token)
        assert as_token_at(url, token.secret, "/api/v1/projects").status_code == 401
        credentials.revoke(token)  # once more, as after a retry: nothing left to do


def test_force_deleting_a_project_under_a_live_run_leaves_the_executor_working(
    live_server: LocalServer,
    live_api: CrucibleClient,
    projects: tuple[str, str],
    tmp_path: Path,
) -> None:
    doomed, other = projects
    also_doomed = live_api.create_project(doomed + "-too").name
    release = tmp_path / "release"
    # The first's id stays missing; the last's, the newest, SQLite gives the next run again.
    first = submit(live_api, doomed, "doomed", "import time; time.sleep(600)")
    bystander = submit(live_api, other, "bystander", PRINT_TOKEN_AND_WAIT, str(release))
    last = submit(live_api, also_doomed, "doomed-too", "import time; time.sleep(600)")
    executor = make_executor(live_server, live_api)
    stop = threading.Event()
    loop = threading.Thread(target=executor.run, args=(stop, 0.1), daemon=True)
    loop.start()
    try:
        running = [wait_for_phase(live_api, r.id, "Running") for r in (first, bystander, last)]
        pids = [int(r.message.rpartition("pid ")[2]) for r in running]
        for run in (running[0], running[2]):
            live_api.request(
                "DELETE", f"/api/v1/projects/{run.project_id}", params={"force": "true"}
            )
        later = submit(live_api, other, "after-the-delete", "print('still served')")
        wait_for_phase(live_api, later.id, "Succeeded")
        release.touch()
        wait_for_phase(live_api, bystander.id, "Succeeded")
        deadline = time.monotonic() + 30
        while process_group_alive(pids[0]) or process_group_alive(pids[2]):
            assert time.monotonic() < deadline, "the deleted runs' processes still run"
            time.sleep(0.1)
    finally:
        stop.set()
        loop.join(30)
    assert not loop.is_alive()


def test_a_run_the_api_refuses_to_start_holds_up_no_other(
    live_server: LocalServer, live_api: CrucibleClient, projects: tuple[str, str]
) -> None:
    stuck = submit(live_api, projects[0], "stuck", "print('never')")
    # An attempt left open (by another executor, say): starting one more is a 409, each tick.
    live_api.start_attempt(stuck.id, stuck.next_attempt_start())
    fine = submit(live_api, projects[1], "fine", "print('ran')")
    executor = make_executor(live_server, live_api)
    tick_until(executor, lambda: live_api.get_run(fine.id).phase.value == "Succeeded")
    assert live_api.get_run(stuck.id).phase.value == "Scheduling"
    assert not [
        t
        for t in live_api.list_tokens().items
        if t.name.endswith(f"run {stuck.id} attempt 2") and t.revoked_at is None
    ]


def wait_for_phase(api: CrucibleClient, run_id: int, phase: str) -> RunPublic:
    deadline = time.monotonic() + 30
    while (run := api.get_run(run_id)).phase.value != phase:
        assert time.monotonic() < deadline, f"run {run_id} is {run.phase.value}, not {phase}"
        time.sleep(0.1)
    return run


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
