"""SIGTERM means "you are about to be stopped" (preemption, node drain, `crucible runs
preempt`): remember it so the training loop can checkpoint before the grace period ends."""

import logging
import signal
import threading
from types import FrameType
from typing import Any

# What `run.finish(preempted=True)` exits with; crucible.sdk re-exports it.
from crucible.domain.resources import PREEMPTED_EXIT_CODE

__all__ = ["PREEMPTED_EXIT_CODE", "PreemptionFlag"]

log = logging.getLogger(__name__)


class PreemptionFlag:
    """Set by SIGTERM. The handler only sets a flag (no I/O, no locks) and then calls the
    handler that was installed before it, unless that was the default (terminate now) or
    ignore: terminating would defeat the point of catching the signal."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: Any = None
        self.installed = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("crucible.init() ran off the main thread; SIGTERM will not be caught")
            return
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self.installed = True

    def uninstall(self) -> None:
        if self.installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self.installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()
        if callable(self._previous):
            self._previous(signum, frame)

    @property
    def is_set(self) -> bool:
        return self._event.is_set()
