"""The launcher of an isolated local attempt, started by `isolation.launcher_command` in a
fresh interpreter (`python -I -B`) with its request (`isolation.Confinement.request`) on stdin.

Three processes, so that nothing of the home but the run's own folders is reachable from the
workload, and the executor's processes are not visible to it:

- the launcher (this process, the one the executor started and signals, in the host's PID
  namespace) makes a mount namespace (and a user namespace, unless it is root, to be allowed
  to), covers the home with an empty tmpfs and binds back what the run may use, then waits
  for the reaper and ends as the workload ended;
- the reaper, PID 1 of a new PID namespace, mounts a fresh /proc and reaps orphans, as an
  init does; without it a workload as PID 1 would ignore every signal it has no handler for;
- the workload, in a user and mount namespace of its own below the launcher's: the mounts it
  inherits from a namespace its own user namespace does not own are locked (MNT_LOCKED), so
  even as root in its namespace it cannot unmount the tmpfs to uncover the home.

All three stay in the executor's process group: SIGTERM and SIGKILL to the group reach the
workload directly, as they did before. The launcher and the reaper ignore SIGTERM (a
handler, not SIG_IGN, so the workload's exec resets it) and follow the workload's end.
It imports only the standard library, and nothing of the run's: it runs before isolation.
"""

import ctypes
import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
# statvfs flags with the same bit as the mount flag: a bind remounted read-only keeps them,
# since a user namespace may not clear flags it inherited locked.
KEPT_FLAGS = 0x1 | 0x2 | 0x4 | 0x8 | 0x400 | 0x800 | 0x1000
PR_SET_PDEATHSIG = 1
WHOLE_ID_RANGE = 4294967295
EXIT_CANNOT_START = 127

_libc = ctypes.CDLL(None, use_errno=True)


def main(request: Mapping[str, Any]) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the request came on stdin; the workload gets nothing there
    os.close(devnull)
    try:
        _confine(request)
    except OSError as exc:
        _fail(f"the run's namespaces could not be set up: {exc}")
    status_read, status_write = os.pipe()
    reaper = os.fork()
    if reaper == 0:
        os.close(status_read)
        try:
            status = _reap(request)
        except OSError as exc:
            _fail(f"the run's PID namespace could not be set up: {exc}")
        os.write(status_write, str(status).encode())
        os._exit(0)
    os.close(status_write)
    _, own = os.waitpid(reaper, 0)
    reported = b""
    while chunk := os.read(status_read, 64):
        reported += chunk
    _end_as(int(reported) if reported else own)


def _confine(request: Mapping[str, Any]) -> None:
    """A mount namespace in which the home is an empty tmpfs but for the binds asked for."""
    uid, gid = os.getuid(), os.getgid()
    root = os.geteuid() == 0
    # Root may make mount namespaces in its own user namespace; anyone else needs a new one.
    _call(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | (0 if root else CLONE_NEWUSER)), "unshare")
    if not root:
        _map_ids("self", uid, gid, whole=False)
    _mount(b"none", "/", None, MS_REC | MS_PRIVATE)
    # Held open before the tmpfs hides them.
    held = [
        (bind["target"], os.open(bind["source"], os.O_PATH | os.O_CLOEXEC), bind["writable"])
        for bind in request["binds"]
    ]
    home = request["home"]
    _mount(b"tmpfs", home, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755")
    for target, fd, writable in held:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            open(target, "a").close()
        _bind(f"/proc/self/fd/{fd}", target, writable=writable)
        os.close(fd)
    for path in request["hidden_files"]:
        _bind(os.devnull, path, writable=False)
    os.chdir(request["cwd"])


def _reap(request: Mapping[str, Any]) -> int:
    """As PID 1 of the new PID namespace: start the workload, reap whatever ends, and answer
    the workload's wait status once it ends (every process left is killed with this one)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _mount(b"proc", "/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    workload = os.fork()
    if workload == 0:
        os.close(ready_read)
        os.close(go_write)
        _start_workload(request, ready_write, go_read)
    os.close(ready_write)
    os.close(go_read)
    if os.read(ready_read, 1):
        # Written from outside its user namespace: root's whole range (tools of a root job
        # switch to nobody), or else the one id this user has.
        _map_ids(str(workload), os.getuid(), os.getgid(), whole=os.geteuid() == 0)
        os.write(go_write, b"1")
    os.close(go_write)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0x7F00  # not reached: the workload is a child until it is reaped
        if pid == workload:
            return status


def _start_workload(request: Mapping[str, Any], ready: int, go: int) -> None:
    try:
        _call(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare of the workload's namespaces")
        os.write(ready, b"1")
        if not os.read(go, 1):
            raise OSError("its user namespace was given no ids")
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        command = request["command"]
        os.execvpe(command[0], command, request["env"])  # noqa: S606 - the run's own command
    except OSError as exc:
        _fail(f"could not start {request['command'][0]}: {exc}")


def _map_ids(pid: str, uid: int, gid: int, *, whole: bool) -> None:
    if whole:
        maps = [("uid_map", f"0 0 {WHOLE_ID_RANGE}"), ("gid_map", f"0 0 {WHOLE_ID_RANGE}")]
    else:
        maps = [("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")]
    for name, text in maps:
        with open(f"/proc/{pid}/{name}", "w") as out:
            out.write(text)


def _bind(source: str, target: str, *, writable: bool) -> None:
    _mount(source.encode(), target, None, MS_BIND | MS_REC)
    kept = os.statvfs(target).f_flag & KEPT_FLAGS
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | kept
    if not writable:
        flags |= MS_RDONLY
    else:
        flags &= ~MS_RDONLY
    _mount(None, target, None, flags)


def _mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None = None
) -> None:
    _call(_libc.mount(source, target.encode(), fstype, flags, data), f"mount on {target}")


def _call(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _end_as(status: int) -> None:
    """Exit as a process with wait status `status` would have: its code, or its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else EXIT_CANNOT_START)


def _fail(message: str) -> None:
    print(f"crucible: {message}", file=sys.stderr, flush=True)
    os._exit(EXIT_CANNOT_START)


def _ignore(_signum: int, _frame: object) -> None:
    """The workload, in the same process group, gets the signal itself."""


if __name__ == "__main__":
    main(json.loads(sys.stdin.buffer.read()))
