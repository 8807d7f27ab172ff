"""Tool calls in a process of their own, with limits (docs/agents.md, "The sandbox").

Each call starts a fresh interpreter (`sandbox_child`) in a new session, in a scratch
directory removed afterwards, with only a minimal environment (nothing of the job's own,
so no token or key reaches a tool). The child cuts its network, gives up root where the
job has it, and sets its CPU, memory, file-size and process limits before it imports the
tool; where it cannot cut the network or give up root, it runs no tool. The parent
enforces the wall clock by killing the child's process group. Whatever a tool does (hangs,
runs out of memory, crashes, raises) comes back as a `ToolRun` with an outcome and a
reason: a call never raises.

A fresh interpreter rather than a fork: the runner holds the model and torch's threads, and
a forked child of a threaded process may inherit a lock held by another thread; a fresh
one is also single-threaded, which `unshare(CLONE_NEWUSER)` requires.
"""

import contextlib
import enum
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crucible.agents.protocol import ToolSpec

_BOOTSTRAP = (
    "import json, sys\n"
    "request = json.loads(sys.stdin.buffer.read())\n"
    "sys.path[:] = request['sys_path']\n"
    "from crucible.agents.sandbox_child import main\n"
    "main(request)\n"
)
"""The child's first lines: the request names the import path, so the tool is found as the
runner finds it; `-I` keeps the job's PYTHON* variables and the user's site out."""

STDERR_TAIL = 2000
"""Characters of a failed tool's stderr kept in its reason."""


class ToolOutcome(enum.StrEnum):
    OK = "ok"
    ERROR = "error"
    """The tool raised: the reason is the exception."""

    TIMEOUT = "timeout"
    """Still running at the wall-clock limit: its process group was killed."""

    CPU_TIME = "cpu_time"
    """Past its CPU-seconds limit (SIGXCPU)."""

    MEMORY = "memory"
    """Past its address-space limit (MemoryError)."""

    CRASHED = "crashed"
    """Ended without an answer: a signal (a segfault), os._exit, a native abort."""

    BAD_RESULT = "bad_result"
    """Returned something that is not JSON, or too much of it."""

    NO_ISOLATION = "no_isolation"
    """Not run: no network namespace could be made, or root could not be given up."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one tool call may use."""

    wall_seconds: float = 10.0
    """Wall-clock time from start to answer, the interpreter's start included."""

    cpu_seconds: int = 5
    """CPU time (RLIMIT_CPU)."""

    memory_bytes: int = 512 * 2**20
    """Address space (RLIMIT_AS): virtual memory, so a tool that imports a large native
    library (NumPy, torch) needs more than the memory it touches."""

    file_bytes: int = 64 * 2**20
    """Largest file the tool may write (RLIMIT_FSIZE), its stderr included."""

    result_chars: int = 16_000
    """Largest answer, as JSON."""

    processes: int = 64
    """Processes and threads (RLIMIT_NPROC), which stops a fork bomb. The kernel counts
    them per real uid: on Linux 5.14 and later a call's own user namespace keeps a count of
    its own, so the limit is the call's; where the child needs no user namespace (a root
    job) or the kernel is older, every process of that uid counts, so calls running at once
    share it, and a non-root job's own threads count too (docs/agents.md). It never binds
    root, which is one reason a root job's tools run as `tool_uid`."""

    tool_uid: int = 65534
    """The user a tool runs as where the job runs as root (nobody); elsewhere tools run as
    the job's user. The tool's module must be readable by it."""

    tool_gid: int = 65534
    """The group a tool runs as where the job runs as root (nogroup), with no others."""

    def __post_init__(self) -> None:
        wall = self.wall_seconds
        if isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < math.inf:
            raise ValueError(
                f"sandbox limit wall_seconds must be a positive number of seconds, got {wall!r}"
            )
        # The rest become resource limits, which are whole numbers.
        for name in ("cpu_seconds", "memory_bytes", "file_bytes", "result_chars", "processes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"sandbox limit {name} must be a positive integer, got {value!r}")
        for name in ("tool_uid", "tool_gid"):
            value = getattr(self, name)
            # 0 would leave a root job's tools root; ids are 32 bits, (uid_t)-1 means none.
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**32 - 1:
                raise ValueError(
                    f"sandbox {name} must be an id between 1 and {2**32 - 2}, got {value!r}"
                )


@dataclass(frozen=True)
class ToolRun:
    """What one call came to."""

    outcome: ToolOutcome
    value: Any = None
    """The tool's return value (a JSON value), when the outcome is ok."""

    detail: str = ""
    """Why it failed, in words, with the tail of the tool's stderr where that helps."""

    isolation: str | None = None
    """How its network was cut: "namespace" (the only way a tool runs); None when it did
    not run."""

    @property
    def ok(self) -> bool:
        return self.outcome is ToolOutcome.OK


class Sandbox:
    """Runs tool calls, each in a process of its own; safe to call from several threads."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()

    def run(self, target: str | Callable[..., Any], arguments: Mapping[str, Any]) -> ToolRun:
        """Call the function `target` names (`package.module:function`) with `arguments` as
        keyword arguments (JSON values)."""
        # Root gives its tools away to an unprivileged user: as root a tool would read every
        # file of the machine (/etc/shadow included) and no process limit would bind it.
        run_as = (self.limits.tool_uid, self.limits.tool_gid) if os.geteuid() == 0 else None
        request = json.dumps(
            {
                "target": ToolSpec("tool", "", {}, target).target,
                "arguments": dict(arguments),
                "limits": asdict(self.limits),
                "run_as": run_as,
                "sys_path": [os.path.abspath(p) for p in sys.path],
            }
        ).encode()
        try:
            root = Path(tempfile.mkdtemp(prefix="crucible-tool-"))
        except OSError as exc:
            return ToolRun(ToolOutcome.CRASHED, detail=f"no scratch directory: {exc}")
        try:
            scratch = root / "scratch"
            scratch.mkdir()
            if run_as is not None:
                # The tool's user owns its scratch directory, and may pass through `root`
                # to it (HOME and TMPDIR are absolute), but not list it or open its stderr.
                os.chown(scratch, *run_as)
                root.chmod(0o711)
            with open(root / "stderr", "w+b") as stderr:
                run = self._run(request, scratch, stderr)
                if run.outcome in (ToolOutcome.ERROR, ToolOutcome.CRASHED, ToolOutcome.MEMORY):
                    stderr.seek(0, os.SEEK_END)
                    stderr.seek(max(0, stderr.tell() - STDERR_TAIL))
                    tail = stderr.read().decode(errors="replace").strip()
                    if tail:
                        run = ToolRun(run.outcome, None, f"{run.detail}\n{tail}", run.isolation)
                return run
        finally:
            _remove(root)

    def _run(self, request: bytes, scratch: Path, stderr: Any) -> ToolRun:
        try:
            child = subprocess.Popen(  # noqa: S603 -- our own interpreter and bootstrap
                [sys.executable, "-I", "-B", "-c", _BOOTSTRAP],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=scratch,
                env=_minimal_environment(scratch),
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:  # no process to be had (EAGAIN, ENOMEM): this call fails
            return ToolRun(ToolOutcome.CRASHED, detail=f"its process could not start: {exc}")
        with child:  # on the way out: its pipes closed, the killed child reaped
            try:
                answer, _ = child.communicate(request, timeout=self.limits.wall_seconds)
            except subprocess.TimeoutExpired:
                return ToolRun(
                    ToolOutcome.TIMEOUT, detail=f"still running after {self.limits.wall_seconds} s"
                )
            finally:
                _kill_group(child.pid)  # the tool, and whatever it left running
        return _read_answer(answer, child.returncode, self.limits)


def _read_answer(answer: bytes, returncode: int, limits: SandboxLimits) -> ToolRun:
    if returncode == -signal.SIGXCPU:
        return ToolRun(ToolOutcome.CPU_TIME, detail=f"used its {limits.cpu_seconds} s of CPU time")
    try:
        parsed = json.loads(answer)
        outcome = ToolOutcome(parsed["outcome"])
    except (ValueError, KeyError, TypeError):
        return ToolRun(
            ToolOutcome.CRASHED, detail=f"ended with {_exit_status(returncode)}, no answer"
        )
    if outcome is ToolOutcome.MEMORY:
        parsed["detail"] = f"MemoryError past its {limits.memory_bytes} bytes of address space"
    return ToolRun(
        outcome,
        value=parsed.get("value"),
        detail=parsed.get("detail", ""),
        isolation=parsed.get("isolation"),
    )


def _exit_status(returncode: int) -> str:
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


def _minimal_environment(scratch: Path) -> dict[str, str]:
    # Built from nothing, not filtered from os.environ: a new secret the job gains later
    # cannot slip through a list of names to drop.
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
    }


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pid, signal.SIGKILL)


def _remove(root: Path) -> None:
    def writable_then_retry(function: Callable[..., Any], path: str, _: Any) -> None:
        # A tool may leave a directory without write permission; its owner may restore it.
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)

    shutil.rmtree(root, onerror=writable_then_retry)
