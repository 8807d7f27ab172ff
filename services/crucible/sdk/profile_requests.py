"""Live profile requests between the heartbeat thread and the training loop, on rank 0.

The heartbeat's answer names the run's open request (`HeartbeatAnswer.profile_request`);
the loop takes it at its next step boundary, and the progress it reports rides on the
following heartbeats until one is answered. No call of its own, no thread of its own.
"""

import threading

from crucible.domain.step_control import ProfileOrder
from crucible.schemas.profiles import ProfileProgress, ProfileRequestPublic


class ProfileRequestMailbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offered: ProfileOrder | None = None
        self._taken: set[int] = set()
        """Requests this process took: the API names one until it is done, and a `started`
        one is this process's own unless a previous attempt started it."""
        self._progress: ProfileProgress | None = None

    # -- the heartbeat thread ----------------------------------------------------------------

    def offer(self, request: ProfileRequestPublic | None) -> None:
        """What the latest heartbeat answered: the request to record, or None."""
        with self._lock:
            if request is None or request.id in self._taken:
                self._offered = None
            else:
                self._offered = ProfileOrder(request_id=request.id, steps=request.steps)

    def progress_to_send(self) -> ProfileProgress | None:
        with self._lock:
            return self._progress

    def sent(self, progress: ProfileProgress) -> None:
        """A heartbeat carrying `progress` was answered; newer progress stays to be sent."""
        with self._lock:
            if self._progress == progress:
                self._progress = None

    # -- the training loop -------------------------------------------------------------------

    def take(self) -> ProfileOrder | None:
        """The request to record, once: a second call answers None until another comes."""
        with self._lock:
            order, self._offered = self._offered, None
            if order is not None:
                self._taken.add(order.request_id)
            return order

    def report(self, progress: ProfileProgress) -> None:
        """Replaces progress not yet sent: the newest state says all the older one did."""
        with self._lock:
            self._progress = progress
