"""The sandbox with each fault injected for real: a tool that hangs, spins, allocates past
its limit, exits, segfaults, raises, returns what JSON cannot hold, writes files, reads the
job's secrets, leaves a process behind, or reaches for a server on the loopback; and a
process under a seccomp filter like runc's default, where no namespace can be made."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.agents.sandbox import Sandbox, SandboxLimits, ToolOutcome
from tests.agents import seccomp
from tests.agents.tools import connect

REPO = Path(__file__).resolve().parents[2]
TOOLS = "tests.agents.tools"
QUICK = SandboxLimits(wall_seconds=5, cpu_seconds=2, memory_bytes=256 * 2**20)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    sandbox = Sandbox(QUICK)
    probe = sandbox.run(f"{TOOLS}:echo", {"text": "hi"})
    if probe.outcome is ToolOutcome.NO_ISOLATION:
        pytest.skip(f"this machine makes no network namespace: {probe.detail}")
    assert probe.ok and probe.value == "hi" and probe.isolation == "namespace", probe
    return sandbox


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepted: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return  # closed
            with connection:
                self.accepted.append(connection.recv(100))


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.server.close()


def test_a_tool_cannot_reach_a_server_on_the_loopback(sandbox: Sandbox, listener: Listener) -> None:
    assert connect(listener.port) == "connected"  # the server answers outside the sandbox
    run = sandbox.run(f"{TOOLS}:connect", {"port": listener.port})
    assert run.outcome is ToolOutcome.ERROR
    assert "Network is unreachable" in run.detail, run.detail
    time.sleep(0.2)
    assert listener.accepted == [b"hello from the sandbox"]  # only the one from outside


def test_a_tool_works_in_a_scratch_directory_removed_afterwards(sandbox: Sandbox) -> None:
    run = sandbox.run(f"{TOOLS}:write_files", {})
    assert run.ok, run
    scratch = Path(run.value)
    assert scratch.name == "scratch" and scratch != Path.cwd()
    assert not scratch.exists() and not scratch.parent.exists()


def test_no_variable_of_the_job_reaches_a_tool(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRUCIBLE_TOKEN", "secret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
    run = sandbox.run(f"{TOOLS}:environment", {})
    assert run.ok, run
    assert "CRUCIBLE_TOKEN" not in run.value and "AWS_SECRET_ACCESS_KEY" not in run.value
    assert set(run.value) == {"PATH", "HOME", "TMPDIR", "LANG"}
    assert "secret" not in json.dumps(run.value)


def test_a_tool_that_sleeps_past_the_wall_clock_is_killed() -> None:
    started = time.monotonic()
    run = Sandbox(SandboxLimits(wall_seconds=1)).run(f"{TOOLS}:sleep", {"seconds": 30})
    assert run.outcome is ToolOutcome.TIMEOUT and "after 1 s" in run.detail
    assert time.monotonic() - started < 5


def test_a_tool_that_spins_is_stopped_by_its_cpu_time() -> None:
    run = Sandbox(SandboxLimits(wall_seconds=20, cpu_seconds=1)).run(f"{TOOLS}:spin", {})
    assert run.outcome is ToolOutcome.CPU_TIME, run
    assert "1 s of CPU time" in run.detail


def test_a_tool_that_allocates_past_its_memory_fails_with_memory(sandbox: Sandbox) -> None:
    run = sandbox.run(f"{TOOLS}:allocate", {"megabytes": 1024})
    assert run.outcome is ToolOutcome.MEMORY, run
    assert str(QUICK.memory_bytes) in run.detail
    assert sandbox.run(f"{TOOLS}:allocate", {"megabytes": 16}).value == 16 * 2**20


def test_a_tool_that_exits_or_segfaults_has_crashed(sandbox: Sandbox) -> None:
    exited = sandbox.run(f"{TOOLS}:exit_at_once", {"code": 3})
    assert exited.outcome is ToolOutcome.CRASHED and "exit code 3" in exited.detail
    crashed = sandbox.run(f"{TOOLS}:segfault", {})
    assert crashed.outcome is ToolOutcome.CRASHED and "signal SIGSEGV" in crashed.detail
    assert "Segmentation fault" in crashed.detail  # faulthandler's report, from its stderr


def test_a_tool_that_raises_or_returns_no_json_says_why(sandbox: Sandbox) -> None:
    raised = sandbox.run(f"{TOOLS}:fail", {"message": "boom"})
    assert raised.outcome is ToolOutcome.ERROR and raised.detail.startswith("ValueError: boom")
    odd = sandbox.run(f"{TOOLS}:not_json", {})
    assert odd.outcome is ToolOutcome.BAD_RESULT and "set, not a JSON value" in odd.detail
    missing = sandbox.run(f"{TOOLS}:no_such_tool", {})
    assert missing.outcome is ToolOutcome.ERROR and "no_such_tool" in missing.detail
    too_long = Sandbox(SandboxLimits(result_chars=100)).run(f"{TOOLS}:echo", {"text": "x" * 200})
    assert too_long.outcome is ToolOutcome.BAD_RESULT and "over the 100 allowed" in too_long.detail


def test_what_a_tool_leaves_running_is_killed(sandbox: Sandbox) -> None:
    run = sandbox.run(f"{TOOLS}:leave_a_process", {})
    assert run.ok, run
    deadline = time.monotonic() + 5
    while _running(run.value) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(run.value)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie waits for its reaper
    except FileNotFoundError:
        return False


PROBE = """
import json, sys
from tests.agents.seccomp import deny_unshare
deny_unshare()
from crucible.agents.sandbox import Sandbox
port = int(sys.argv[1])
runs = {
    "identity": Sandbox().run("tests.agents.tools:identity", {}),
    "fork_exec": Sandbox().run("tests.agents.tools:connect_from_a_child", {"port": port}),
}
print(json.dumps({k: [str(r.outcome), r.detail, r.isolation] for k, r in runs.items()}))
"""


@pytest.mark.skipif(not seccomp.supported(), reason="the seccomp filter knows x86_64, aarch64")
def test_where_no_namespace_can_be_made_no_tool_runs(listener: Listener) -> None:
    # A process of its own: the filter cannot be taken off again. The second tool reached
    # the listener under the audit hook the sandbox once fell back on, which
    # `_posixsubprocess.fork_exec` passes without an event.
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(listener.port)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    runs = json.loads(probe.stdout)
    for outcome, detail, isolation in runs.values():
        assert (outcome, isolation) == ("no_isolation", None)
        assert "Operation not permitted" in detail and "runs no tool without one" in detail
    time.sleep(0.2)
    assert listener.accepted == []


def test_no_setting_runs_a_tool_under_an_audit_hook_alone() -> None:
    # The "best-effort" policy ran tools with the network open wherever no namespace could
    # be made, and called that isolation; it is gone, not ignored.
    with pytest.raises(TypeError, match="network"):
        SandboxLimits(network="best-effort")  # type: ignore[call-arg]


ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="only a root job gives its tools away")


@ROOT
def test_a_root_jobs_tool_runs_as_nobody_and_reads_no_secret(sandbox: Sandbox) -> None:
    with open("/etc/shadow") as shadow:  # the job itself may: the file is there
        shadow.read(1)
    who = sandbox.run(f"{TOOLS}:identity", {})
    assert who.ok and who.value["uid"] == QUICK.tool_uid == 65534, who
    shadow_run = sandbox.run(f"{TOOLS}:read_file", {"path": "/etc/shadow"})
    assert shadow_run.outcome is ToolOutcome.ERROR, shadow_run
    assert shadow_run.detail.startswith("PermissionError"), shadow_run.detail
    # Its scratch directory is its own, by relative path and through TMPDIR alike.
    assert sandbox.run(f"{TOOLS}:write_files", {}).ok
    temporary = sandbox.run(f"{TOOLS}:write_temporary_file", {})
    assert temporary.ok and "/scratch/" in temporary.value, temporary


@ROOT
def test_a_root_jobs_tool_runs_as_the_user_its_limits_name(sandbox: Sandbox) -> None:
    run = Sandbox(SandboxLimits(tool_uid=4242, tool_gid=4343)).run(f"{TOOLS}:identity", {})
    assert run.ok and run.value["uid"] == 4242, run


NO_SYS_ADMIN = """
import json, sys
from crucible.agents.sandbox import Sandbox, SandboxLimits
sandbox = Sandbox(SandboxLimits(tool_uid=4242, tool_gid=4343))
run = sandbox.run("tests.agents.plain_tools:whoami", {})
print(json.dumps([str(run.outcome), run.value, run.detail, run.isolation]))
"""


@ROOT
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) drops the cap")
def test_a_root_job_without_cap_sys_admin_gives_up_root_then_cuts_the_network() -> None:
    # A container's root: the network namespace alone is refused, so the child gives up
    # root first and makes a user namespace too, as any user does.
    command = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
    probe = subprocess.run(
        [*command, sys.executable, "-c", NO_SYS_ADMIN],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome, value, detail, isolation = json.loads(probe.stdout)
    assert (outcome, isolation) == ("ok", "namespace"), detail
    assert value["uid"] == 4242 and value["mapped"] == ["4242", "4242", "1"], value
    assert value["network"] != os.readlink("/proc/self/ns/net")
    assert not value["reads_shadow"]


def test_a_fork_bomb_stops_at_the_process_limit(sandbox: Sandbox) -> None:
    limits = SandboxLimits(wall_seconds=10, cpu_seconds=5, processes=16)
    run = Sandbox(limits).run(f"{TOOLS}:start_children", {"count": 200})
    assert run.ok, run
    # The interpreter is one of the 16, and other processes of the uid may count too.
    assert len(run.value["pids"]) < limits.processes, run.value
    assert "Resource temporarily unavailable" in run.value["refused"], run.value
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in run.value["pids"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in run.value["pids"])  # the group went with the call


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cpu_seconds": 0}, "cpu_seconds must be a positive integer, got 0"),
        ({"cpu_seconds": 1.5}, "cpu_seconds must be a positive integer, got 1.5"),
        (
            {"wall_seconds": float("inf")},
            "wall_seconds must be a positive number of seconds, got inf",
        ),
        ({"memory_bytes": "1G"}, "memory_bytes must be a positive integer, got '1G'"),
        ({"processes": 0}, "processes must be a positive integer, got 0"),
        ({"tool_uid": 0}, "tool_uid must be an id between 1 and 4294967294, got 0"),
        ({"tool_gid": -1}, "tool_gid must be an id between 1 and 4294967294, got -1"),
    ],
)
def test_bad_limits_name_the_value(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match="sandbox") as raised:
        SandboxLimits(**change)  # type: ignore[arg-type]
    assert named in str(raised.value)


def test_the_scratch_directories_do_not_pile_up(sandbox: Sandbox) -> None:
    before = _scratch_dirs()
    for _ in range(3):
        sandbox.run(f"{TOOLS}:write_files", {})
    assert _scratch_dirs() <= before


def _scratch_dirs() -> set[str]:
    import tempfile

    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("crucible-tool-")}
