"""Tools for the sandbox's tests, each doing one thing a tool must not get away with. Run
by import path in the sandbox's child, which imports this module afresh."""

import ctypes
import os
import socket
import subprocess
import time
from typing import Any


def echo(text: str) -> str:
    return text


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke up"


def spin() -> None:
    while True:
        pass


def allocate(megabytes: int) -> int:
    block = bytearray(megabytes * 2**20)
    return len(block)


def exit_at_once(code: int) -> None:
    os._exit(code)


def segfault() -> None:
    ctypes.string_at(0)


def fail(message: str) -> None:
    raise ValueError(message)


def not_json() -> set[int]:
    return {1, 2}


def connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
        connection.sendall(b"hello from the sandbox")
    return "connected"


def write_files() -> str:
    os.makedirs("deep/er", exist_ok=True)
    with open("deep/er/notes.txt", "w") as out:
        out.write("left behind?")
    return os.getcwd()


def environment() -> dict[str, str]:
    return dict(os.environ)


def leave_a_process() -> int:
    return subprocess.Popen(["sleep", "60"]).pid


def identity() -> dict[str, Any]:
    return {"uid": os.getuid(), "cwd": os.getcwd()}


def read_file(path: str) -> str:
    with open(path) as source:
        return source.read(100)


def write_temporary_file() -> str:
    import tempfile

    with tempfile.NamedTemporaryFile(delete=False) as out:  # in TMPDIR, the scratch directory
        out.write(b"scratch")
    return out.name


def start_children(count: int) -> dict[str, Any]:
    """Start up to `count` sleeping children (a fork bomb with an end), keeping what refused
    the next one."""
    pids: list[int] = []
    refused = ""
    for _ in range(count):
        try:
            pids.append(subprocess.Popen(["sleep", "60"]).pid)
        except OSError as exc:
            refused = f"{type(exc).__name__}: {exc}"
            break
    return {"pids": pids, "refused": refused}


def connect_from_a_child(port: int) -> str:
    """Reach the loopback from a program started by `_posixsubprocess.fork_exec`, which
    subprocess calls after its audit event and which raises none of its own."""
    import _posixsubprocess  # type: ignore[import-not-found]
    import sys

    code = (
        "import socket, sys\n"
        f"c = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "c.sendall(b'hello from a child'); c.close()\n"
    )
    errpipe_read, errpipe_write = os.pipe()
    args = [sys.executable, "-c", code]
    pid = _posixsubprocess.fork_exec(
        args, [os.fsencode(sys.executable)], True, (errpipe_write,), None, None,
        -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write,
        True, False, -1, None, None, None, -1, None, False,
    )  # fmt: skip
    os.close(errpipe_write)
    os.close(errpipe_read)
    _, status = os.waitpid(pid, 0)
    return f"child exited {os.waitstatus_to_exitcode(status)}"
