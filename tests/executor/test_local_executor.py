"""The local executor against a real server: phases, attempts, logs, preemption, GPU queueing.

Workloads here are small Python programs given as the spec's command, so each test shows one
behaviour of the executor and finishes in seconds.
"""

import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from crucible.client import CrucibleClient
from crucible.executor.credentials import token_name
from crucible.executor.gpus import GpuPool
from crucible.executor.launch import build_command
from crucible.executor.local import LocalExecutor
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.schemas.runs import RunEventPublic, RunPublic, RunSubmit
from tests.servers import LocalServer

TRAP_SIGTERM = """
import signal, sys, time
def on_term(*_):
    print("checkpointed on SIGTERM", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
print("training", flush=True)
while True:
    time.sleep(0.05)
"""


def make_executor(server: LocalServer, api: CrucibleClient, gpus: list[int]) -> LocalExecutor:
    return LocalExecutor(
        api,
        api_url=server.url,
        home=server.home,
        gpus=GpuPool(gpus),
        grace_seconds=5,
    )


def submit(api: CrucibleClient, name: str, code: str, **spec: object) -> RunPublic:
    manifest = {
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "executor", "command": [sys.executable, "-c", code], **spec},
    }
    return api.submit_run(RunSubmit(project="default", manifest=manifest))  # type: ignore[arg-type]


def tick_until(executor: LocalExecutor, done: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for the executor"
        executor.tick()
        time.sleep(0.1)


def phase_of(api: CrucibleClient, run_id: int) -> str:
    return api.get_run(run_id).phase.value


def assert_token_revoked(api: CrucibleClient, run_id: int, attempt: int) -> None:
    """The attempt's own token (tests/executor/test_run_credentials.py) died with it."""
    (token,) = [t for t in api.list_tokens().items if t.name == token_name(run_id, attempt)]
    assert token.revoked_at is not None


def interruptions(api: CrucibleClient, run_id: int) -> list[RunEventPublic]:
    """The run's moves to Interrupted: recovery decides in the same transaction as the
    report, so the phase itself is already the decision's when the report returns."""
    return [
        e
        for e in api.list_events(run_id)
        if e.type == "PhaseChanged" and e.data.get("phase") == "Interrupted"
    ]


def test_success_records_phases_attempt_env_and_log(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    code = (
        "import os; print('run', os.environ['CRUCIBLE_RUN_ID'], 'attempt', "
        "os.environ['CRUCIBLE_ATTEMPT'], os.environ['CRUCIBLE_CONFIG'])"
    )
    run = submit(live_api, "ok-run", code, config={"lr": 0.1})
    executor = make_executor(live_server, live_api, [])
    tick_until(executor, lambda: phase_of(live_api, run.id) == "Succeeded")
    attempts = live_api.list_attempts(run.id)
    assert [(a.number, a.start_reason.value, a.end_reason, a.exit_code) for a in attempts] == [
        (1, "initial", "Completed", 0)
    ]
    phases = [e.data.get("phase") for e in live_api.list_events(run.id) if e.type == "PhaseChanged"]
    assert phases == ["Scheduling", "Running", "Succeeded"]
    log = executor.log_path(run.id, 1).read_text()
    assert f"run {run.id} attempt 1 " in log and '"lr": 0.1' in log


def test_non_zero_exit_interrupts_the_run_for_recovery(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    # Retry or fail is recovery's decision (tests/workers); the executor reports.
    # The workload leaves its last sentence where the contract says, as a pod would in
    # /dev/termination-log; the attempt's end carries it.
    code = (
        "import os, sys; open(os.environ['CRUCIBLE_TERMINATION_LOG'], 'w')"
        ".write('the tokenizer file is missing'); sys.exit(3)"
    )
    run = submit(live_api, "bad-run", code)
    executor = make_executor(live_server, live_api, [])
    tick_until(executor, lambda: bool(interruptions(live_api, run.id)))
    attempt = live_api.list_attempts(run.id)[0]
    assert (attempt.end_reason, attempt.exit_code) == ("ErrorExit", 3)
    assert "exit code 3: the tokenizer file is missing" in attempt.message
    assert_token_revoked(live_api, run.id, 1)
    (interrupted,) = interruptions(live_api, run.id)
    assert interrupted.reason == "ErrorExit" and "exit code 3" in interrupted.message


def test_preempt_sends_sigterm_and_ends_the_attempt_as_interrupted(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    run = submit(live_api, "preempted-run", TRAP_SIGTERM)
    executor = make_executor(live_server, live_api, [])
    tick_until(executor, lambda: phase_of(live_api, run.id) == "Running")
    tick_until(executor, lambda: "training" in executor.log_path(run.id, 1).read_text())
    assert executor.preempt(run.id)
    tick_until(executor, lambda: bool(interruptions(live_api, run.id)))
    attempt = live_api.list_attempts(run.id)[0]
    assert (attempt.end_reason, attempt.exit_code) == ("Preempted", 143)
    assert_token_revoked(live_api, run.id, 1)
    assert "checkpointed on SIGTERM" in executor.log_path(run.id, 1).read_text()


def test_cancel_stops_the_processes(live_server: LocalServer, live_api: CrucibleClient) -> None:
    run = submit(live_api, "cancelled-run", "import time; time.sleep(600)")
    executor = make_executor(live_server, live_api, [])
    tick_until(executor, lambda: phase_of(live_api, run.id) == "Running")
    live_api.cancel_run(run.id)
    tick_until(executor, lambda: live_api.list_attempts(run.id)[0].ended_at is not None)
    assert live_api.list_attempts(run.id)[0].end_reason == "CancelledByUser"
    assert phase_of(live_api, run.id) == "Cancelled"
    assert_token_revoked(live_api, run.id, 1)


def test_runs_queue_for_gpus_and_get_their_own_devices(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    code = "import os, time; print('gpus', os.environ['CUDA_VISIBLE_DEVICES']); time.sleep(1)"
    first = submit(live_api, "gpu-first", code, gpusPerNode=2, processesPerNode=1)
    second = submit(live_api, "gpu-second", code, gpusPerNode=2, processesPerNode=1)
    too_big = submit(live_api, "gpu-too-big", code, gpusPerNode=4)
    executor = make_executor(live_server, live_api, [0, 1])
    tick_until(executor, lambda: phase_of(live_api, first.id) == "Running")
    assert phase_of(live_api, second.id) == "Scheduling"
    assert phase_of(live_api, too_big.id) == "Failed"
    assert "needs 4 GPUs" in live_api.get_run(too_big.id).message
    # What the dashboard shows: the run's process group with its devices, this machine's
    # GPUs all in use, and the second run waiting for them.
    (group,) = live_api.list_run_pods(first.id)
    assert (group.cluster, group.gpus, group.gpu_devices, group.phase) == (
        "local",
        2,
        "0,1",
        "Running",
    )
    assert group.pid is not None and group.node
    view = live_api.get_cluster()
    (machine,) = view.clusters
    assert (machine.name, machine.gpus_allocatable, machine.gpus_allocated) == ("local", 2, 2)
    assert [(w.name, w.phase.value) for w in view.waiting if w.name.startswith("gpu-")] == [
        ("gpu-second", "Scheduling")
    ]
    tick_until(executor, lambda: phase_of(live_api, second.id) == "Succeeded")
    assert phase_of(live_api, first.id) == "Succeeded"
    for run in (first, second):
        assert "gpus 0,1" in executor.log_path(run.id, 1).read_text()


def test_runs_left_running_by_a_dead_executor_are_interrupted(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    run = submit(live_api, "orphan-run", "import time; time.sleep(600)")
    crashed = make_executor(live_server, live_api, [])
    tick_until(crashed, lambda: phase_of(live_api, run.id) == "Running")
    make_executor(live_server, live_api, []).adopt_orphans()
    assert [e.reason for e in interruptions(live_api, run.id)] == ["NodeLost"]
    assert live_api.list_attempts(run.id)[0].end_reason == "NodeLost"
    adopted = phase_of(live_api, run.id)
    crashed.shutdown()  # its late exit report must not overrule the adopted state
    assert phase_of(live_api, run.id) == adopted
    assert [e.reason for e in interruptions(live_api, run.id)] == ["NodeLost"]
    assert live_api.list_attempts(run.id)[0].end_reason == "NodeLost"


def test_run_loop_stops_cleanly(live_server: LocalServer, live_api: CrucibleClient) -> None:
    run = submit(live_api, "loop-run", "print('done')")
    executor = make_executor(live_server, live_api, [])
    stop = threading.Event()
    thread = threading.Thread(target=executor.run, args=(stop, 0.1))
    thread.start()
    deadline = time.monotonic() + 30
    while phase_of(live_api, run.id) != "Succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    stop.set()
    thread.join(30)
    assert not thread.is_alive()


def test_a_run_waits_for_its_inputs_and_gets_them_pinned_in_its_environment(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    code = "import os; print('inputs', os.environ['CRUCIBLE_INPUTS'])"
    run = submit(live_api, "needs-data", code, inputs=[{"dataset": "exec-data@latest"}])
    executor = make_executor(live_server, live_api, [])
    executor.tick()
    assert phase_of(live_api, run.id) == "WaitingForInputs"
    assert "dataset 'exec-data' has no version yet" in live_api.get_run(run.id).message
    home = live_server.home  # the project's own storage is under it
    live_api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "exec-data",
                "uri": (home / "projects" / str(run.project_id) / "exec-data").as_uri(),
                "digest": "sha256:" + "0" * 64,
            }
        )
    )
    tick_until(executor, lambda: phase_of(live_api, run.id) == "Succeeded")
    log = executor.log_path(run.id, 1).read_text()
    assert 'inputs {"datasets": ["exec-data@1"], "checkpoint": null, "artifacts": {}}' in log


def test_a_spec_without_a_command_runs_the_reference_workload() -> None:
    def run(kind: str, **spec: object) -> RunPublic:
        now = datetime.now(UTC)
        return RunPublic.model_validate(
            {
                **dict.fromkeys(["id", "project_id", "experiment_id", "attempt_count", "gpus"], 1),
                "name": "r",
                "kind": kind,
                "backend": "local",
                "phase": "Pending",
                "reason": "",
                "message": "",
                "manifest": {"spec": spec},
                "spec_digest": "",
                "code_ref": "",
                "tags": {},
                **dict.fromkeys(
                    [
                        "code",
                        "k8s_namespace",
                        "k8s_name",
                        "k8s_uid",
                        "resolved_inputs",
                        "next_attempt_reason",
                        "resume_checkpoint_id",
                        "next_attempt_at",
                        "latest_step",
                        "started_at",
                        "finished_at",
                    ]
                ),
                "created_at": now,
                "updated_at": now,
            }
        )

    assert build_command(run("train"))[1:] == ["-m", "crucible.jobs.train"]
    assert build_command(run("eval"))[1:] == ["-m", "crucible.jobs.eval"]
    teacher = run("rollout", policy={"teacher": "arithmetic-solver"})
    assert build_command(teacher)[1:] == ["-m", "crucible.jobs.datagen"]
    policy = run("rollout", policy={"checkpoint": {"id": 3}})
    assert build_command(policy)[1:] == ["-m", "crucible.jobs.rollout"]
    # A bare python is the executor's interpreter (its venv), not the first on PATH.
    own = run("train", command=["python", "-m", "crucible.jobs.tokenizer"])
    assert build_command(own) == [sys.executable, "-m", "crucible.jobs.tokenizer"]
    assert (
        build_command(run("train", command=["/usr/bin/python3", "x.py"]))[0] == "/usr/bin/python3"
    )
    # Two processes go through torchrun, which takes the module after its own -m.
    ddp = build_command(run("train", processesPerNode=2, args=["--x"]))
    assert ddp[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "crucible.jobs.train",
        "--x",
    ]
