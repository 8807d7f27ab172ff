"""A background heartbeat, so the control plane can tell a hung attempt from a slow one.

It also carries live profile requests both ways (`profile_requests.py`): the answer names
the request to record, and the next beats report how it stands.
"""

import logging
import threading

from crucible.client import ApiError, CrucibleClient
from crucible.schemas.provenance import AttemptEnvironment
from crucible.sdk.profile_requests import ProfileRequestMailbox

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats every `interval` seconds; the first beats also carry what the workload runs on
    (`environment`) until the API has it, so provenance costs the training loop nothing."""

    def __init__(
        self,
        client: CrucibleClient,
        run_id: int,
        attempt: int,
        interval: float,
        environment: AttemptEnvironment | None = None,
        profile_requests: ProfileRequestMailbox | None = None,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._attempt = attempt
        self._interval = interval
        self._environment = environment
        self._profile_requests = profile_requests or ProfileRequestMailbox()
        self._wake = threading.Event()
        self._stopping = False
        self._warned = False
        self.beats = 0
        self._thread = threading.Thread(target=self._run, name="crucible-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._beat():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stopping:
                # Progress reported just before the end (a profile of the last steps) would
                # otherwise never be sent.
                if self._profile_requests.progress_to_send() is not None:
                    self._beat()
                return

    def _beat(self) -> bool:
        """One heartbeat; False once the API says the attempt ended."""
        progress = self._profile_requests.progress_to_send()
        try:
            if self._environment is not None:
                self._client.report_environment(self._run_id, self._attempt, self._environment)
                self._environment = None
            answer = self._client.heartbeat(self._run_id, self._attempt, progress)
            self.beats += 1
            if progress is not None:
                self._profile_requests.sent(progress)
            self._profile_requests.offer(answer.profile_request)
        except ApiError as exc:
            if exc.status == 409:  # the attempt ended: nobody is listening any more
                log.warning("crucible: heartbeats stopped: %s", exc)
                return False
            if progress is not None and 400 <= exc.status < 500:
                # Refused for what it carries, it would be refused for ever: the beats
                # matter more than one request's progress.
                log.warning("crucible: profile progress dropped: %s", exc)
                self._profile_requests.sent(progress)
            elif not self._warned:
                self._warned = True
                log.warning("crucible: heartbeat failed (%s); will keep trying", exc)
        return True

    def beat_now(self) -> None:
        """Beat without waiting out the interval (progress to report)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=5.0)
