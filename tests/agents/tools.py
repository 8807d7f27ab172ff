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
