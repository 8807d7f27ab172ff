"""Pod logs kept while a test runs: `kubectl logs -f` of every pod a selector matches, each
into a file, so a pod the operator deletes (the rest of a failed gang) still says why it
stopped when the test reports a failure."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from tests.k8s import cluster_helpers as h

# `kubectl logs -f` of a container not started yet says so in one short line and exits:
# such a pod is followed again.
STARTING_MESSAGE_BYTES = 400
# Lines every pod repeats, which would push the telling ones out of a report.
NOISE = ("botocore", "warnings.warn", "fsync not supported", "frame #")


class PodLogRecorder:
    def __init__(self, namespace: str, selector: str, directory: Path) -> None:
        self.namespace, self.selector, self.directory = namespace, selector, directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._followed: dict[str, subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PodLogRecorder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for follower in self._followed.values():
            follower.terminate()

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            names = h.kubectl(
                "get",
                "pods",
                "-l",
                self.selector,
                "-o",
                "name",
                namespace=self.namespace,
                check=False,
            ).split()
            for name in (n.removeprefix("pod/") for n in names):
                if name in self._followed and self._followed[name].poll() is None:
                    continue
                if name in self._followed and self._size(name) > STARTING_MESSAGE_BYTES:
                    continue  # followed to its end already
                with (self.directory / f"{name}.log").open("wb") as out:
                    # Waits for a container that has not started yet, then follows it.
                    self._followed[name] = subprocess.Popen(
                        ["kubectl", "logs", "-f", name, "-n", self.namespace],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )

    def _size(self, name: str) -> int:
        path = self.directory / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def tails(self, lines: int = 40) -> str:
        """The end of every recorded pod's log, without the noise, short lines."""
        out = []
        for path in sorted(self.directory.glob("*.log")):
            text = path.read_text(errors="replace")
            kept = [line[:300] for line in text.splitlines() if not any(n in line for n in NOISE)]
            out.append(f"--- {path.stem} (recorded)\n" + "\n".join(kept[-lines:]))
        return "\n".join(out)
