"""Print a log file, optionally following it until its run finishes (`tail -f` that stops)."""

import sys
import time
from collections.abc import Callable
from pathlib import Path


def follow_log(path: Path, *, follow: bool, finished: Callable[[], bool]) -> None:
    with path.open("rb") as handle:
        while True:
            chunk = handle.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif not follow or finished():
                sys.stdout.buffer.write(handle.read())  # lines written just before it ended
                sys.stdout.flush()
                return
            else:
                time.sleep(0.5)
