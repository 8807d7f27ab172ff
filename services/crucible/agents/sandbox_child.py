"""The sandbox's child: one tool call in a fresh interpreter (`python -I -B`), started by
`sandbox.Sandbox.run` with the request on stdin and the answer expected on stdout.

Before it imports the tool it cuts the network (a new user and network namespace), sets its
resource limits, and turns stdout over to the tool's stderr file, so nothing the tool
prints can be taken for the answer. It imports only the standard library: everything it
loads is time added to each call.
"""

import ctypes
import faulthandler
import importlib
import json
import os
import resource
import signal
import sys
from collections.abc import Mapping
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

_AUDITED_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.sendto",
        "socket.sendmsg",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.call_function",
        "ctypes.cdata",
    }
)
"""What the audit-hook fallback refuses: sockets, and the ways around a Python-level refusal
(another program, native code through ctypes)."""


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
    unshare_error = _new_network_namespace()
    isolation = "namespace"
    if unshare_error is not None:
        if request["network"] != "best-effort":
            detail = (
                f"no network namespace could be made ({unshare_error}), and the network "
                'policy "none" runs no tool without one'
            )
            return {"outcome": "no_isolation", "detail": detail, "isolation": None}
        sys.addaudithook(_refuse)
        isolation = "audit-hook"
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


def _new_network_namespace() -> str | None:
    """Put this process alone in a new user and network namespace (the user namespace is
    what lets a process without CAP_SYS_ADMIN make the network one); None once done, else
    what refused it."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWUSER | CLONE_NEWNET): {os.strerror(ctypes.get_errno())}"
    _map_ids(uid, gid)
    return None


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


def _refuse(event: str, _arguments: tuple[Any, ...]) -> None:
    if event in _AUDITED_EVENTS:
        raise PermissionError(f"the sandbox has no network namespace and refuses {event}")


def _limit(limits: Mapping[str, int]) -> None:
    cpu = limits["cpu_seconds"]
    # The soft limit sends SIGXCPU (which ends the process), the hard one SIGKILL a second
    # later for a tool that catches the first.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Past the file limit, a write fails (an OSError the tool may raise) instead of the
    # signal that would end the process without a word.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _function(target: str) -> Any:
    module_name, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value
