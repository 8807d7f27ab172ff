"""The sandbox's child: one tool call in a fresh interpreter (`python -I -B`), started by
`sandbox.Sandbox.run` with the request on stdin and the answer expected on stdout.

Before it imports the tool it cuts the network (a new network namespace, and a user
namespace where it is not root), gives up root where the job runs as root, sets its
resource limits, and turns stdout over to the tool's stderr file, so nothing the tool
prints can be taken for the answer. Where it cannot cut the network or give up root, it
runs no tool: a Python audit hook was tried in place of the namespace once, and a tool got
past it (`_posixsubprocess.fork_exec` raises no audit event), so the sandbox has no mode
that runs a tool with the network open. It imports only the standard library: everything it
loads is time added to each call.
"""

import ctypes
import faulthandler
import importlib
import json
import os
import resource
import signal
import stat
import sys
from collections.abc import Mapping
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38


def main(request: Mapping[str, Any]) -> None:
    """Run the call `request` describes (from `sandbox.Sandbox.run`) and write its answer."""
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # the tool's prints go to its stderr file
    answer = _outcome(request)
    try:
        text = json.dumps(answer)
    except (TypeError, ValueError) as exc:
        kind = type(answer["value"]).__name__
        answer = {
            "outcome": "bad_result",
            "detail": f"the tool returned a {kind}, not a JSON value ({exc})",
            "isolation": answer["isolation"],
        }
        text = json.dumps(answer)
    most = request["limits"]["result_chars"]
    if len(text) > most:
        answer = {
            "outcome": "bad_result",
            "detail": f"the result is {len(text)} characters as JSON, over the {most} allowed",
            "isolation": answer["isolation"],
        }
        text = json.dumps(answer)
    data = text.encode()
    while data:
        data = data[os.write(answer_fd, data) :]


def _outcome(request: Mapping[str, Any]) -> dict[str, Any]:
    run_as = request["run_as"]
    refused = _isolate(None if run_as is None else (run_as[0], run_as[1]), request["sys_path"])
    if refused is not None:
        return {"outcome": "no_isolation", "detail": refused, "isolation": None}
    isolation = "namespace"
    _limit(request["limits"])
    faulthandler.enable()  # a crash leaves its traceback in the stderr file
    try:
        value = _function(request["target"])(**request["arguments"])
    except MemoryError:
        return {"outcome": "memory", "detail": "MemoryError", "isolation": isolation}
    except BaseException as exc:  # whatever the tool raised is its outcome
        detail = f"{type(exc).__name__}: {exc}"
        return {"outcome": "error", "detail": detail, "isolation": isolation}
    return {"outcome": "ok", "value": value, "isolation": isolation}


def _isolate(run_as: tuple[int, int] | None, sys_path: list[str]) -> str | None:
    """Cut the network, and become `run_as` (uid, gid) when given; None once done, else
    why not, in which case no tool may run."""
    if run_as is None:
        return _new_network_namespace(CLONE_NEWUSER | CLONE_NEWNET)
    # Root with CAP_SYS_ADMIN makes the network namespace alone, before it gives up root,
    # which works where unprivileged user namespaces are refused (Ubuntu's AppArmor rule,
    # Debian's sysctl); root without it (a container's) needs the user namespace, which
    # an unprivileged user may make: give up root first, then ask for both.
    as_root = _new_network_namespace(CLONE_NEWNET)
    try:
        if as_root is None:
            _expose(_interpreter_paths(sys_path), *run_as)
        _drop_root(*run_as)
    except OSError as exc:
        return f"the job runs as root and its tools could not run as uid {run_as[0]}: {exc}"
    if as_root is None:
        return None
    # Giving up root left this process undumpable, and its /proc/self files root's: it
    # could not write its own uid_map, and the tool would see itself as the overflow id.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    return _new_network_namespace(CLONE_NEWUSER | CLONE_NEWNET)


def _interpreter_paths(sys_path: list[str]) -> list[str]:
    """What the tool's imports (and a Python it starts) read: the import path, the
    interpreter's installation, the venv."""
    executable = os.path.dirname(os.path.realpath(sys.executable))
    found = {*sys_path, sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    return sorted(path for path in {*found, executable} if path and os.path.exists(path))


def _expose(paths: list[str], uid: int, gid: int) -> None:
    """Make each of `paths` reachable by `uid`:`gid` in a mount namespace of this process's
    own, where a directory on the way to it is closed to them (a root job's Python under
    /root, 0700): that directory is covered with an empty tmpfs, and only the paths are
    bound back into it, read-only, at their own names. Nothing else of it is shown."""
    closed: dict[str, list[str]] = {}
    for path in paths:
        ancestor = _first_closed(path, uid, gid)
        if ancestor is not None:
            closed.setdefault(ancestor, []).append(path)
    if not closed:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    _call(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Private first, so that nothing mounted here reaches the job's own namespace.
    _call(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for ancestor, inside in closed.items():
        outermost = [p for p in inside if not any(p.startswith(q + "/") for q in inside)]
        # Held open before the tmpfs hides them.
        held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in outermost]
        covered = ancestor.encode()
        _call(
            libc.mount(b"tmpfs", covered, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=64k"),
            f"mount tmpfs on {ancestor}",
        )
        for path, fd in held:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                open(path, "a").close()  # the mount point of a file
            source, target = f"/proc/self/fd/{fd}".encode(), path.encode()
            _call(libc.mount(source, target, None, MS_BIND | MS_REC, None), f"bind {path}")
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
            _call(libc.mount(None, target, None, flags, None), f"remount {path} read-only")
            os.close(fd)


def _first_closed(path: str, uid: int, gid: int) -> str | None:
    """The directory nearest / above `path` that `uid`:`gid` may not pass through."""
    current = "/"
    for part in path.strip("/").split("/")[:-1]:
        current = os.path.join(current, part)
        status = os.stat(current)
        if status.st_uid == uid:
            allowed = status.st_mode & stat.S_IXUSR
        elif status.st_gid == gid:
            allowed = status.st_mode & stat.S_IXGRP
        else:
            allowed = status.st_mode & stat.S_IXOTH
        if not allowed:
            return current
    return None


def _call(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _new_network_namespace(flags: int) -> str | None:
    """Put this process alone in a new network namespace (and user namespace, when `flags`
    asks: it is what lets a process without CAP_SYS_ADMIN make the network one); None once
    done, else what refused it."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(flags) != 0:
        names = " | ".join(
            name
            for name, flag in (("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNET", CLONE_NEWNET))
            if flags & flag
        )
        error = os.strerror(ctypes.get_errno())
        return (
            f"no network namespace could be made (unshare({names}): {error}), and the "
            "sandbox runs no tool without one"
        )
    if flags & CLONE_NEWUSER:
        _map_ids(uid, gid)
    return None


def _drop_root(uid: int, gid: int) -> None:
    """Become `uid`:`gid` with no supplementary groups, for good: real, effective and saved
    ids all change, and no set-user-ID program (su, sudo) may raise them again."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise OSError(f"the ids are {os.getresuid()}:{os.getresgid()} after the change")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _map_ids(uid: int, gid: int) -> None:
    # Unmapped, the tool would see itself as nobody (65534); mapped to itself it keeps its
    # ids. Not needed for isolation, so a refusal is let go.
    try:
        for name, text in (
            ("uid_map", f"{uid} {uid} 1"),
            ("setgroups", "deny"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as out:
                out.write(text)
    except OSError:
        pass


def _limit(limits: Mapping[str, int]) -> None:
    cpu = limits["cpu_seconds"]
    # The soft limit sends SIGXCPU (which ends the process), the hard one SIGKILL a second
    # later for a tool that catches the first.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Set after the user namespace is made, so that the namespace's parent keeps counting
    # against the job's own limit; within it, the count is this call's processes alone
    # (Linux 5.14 and later; SandboxLimits.processes says what a shared uid gets). Never
    # above the hard limit this process was given, which it may not raise.
    processes = limits["processes"]
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if hard != resource.RLIM_INFINITY:
        processes = min(processes, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    # Past the file limit, a write fails (an OSError the tool may raise) instead of the
    # signal that would end the process without a word.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _function(target: str) -> Any:
    module_name, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value
