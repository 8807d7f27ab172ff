"""A background heartbeat, so the control plane can tell a hung attempt from a slow one."""

import logging
import threading

from crucible.client import ApiError, CrucibleClient
from crucible.schemas.provenance import AttemptEnvironment

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
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._attempt = attempt
        self._interval = interval
        self._environment = environment
        self._stopped = threading.Event()
        self._warned = False
        self.beats = 0
        self._thread = threading.Thread(target=self._run, name="crucible-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                if self._environment is not None:
                    self._client.report_environment(self._run_id, self._attempt, self._environment)
                    self._environment = None
                self._client.heartbeat(self._run_id, self._attempt)
                self.beats += 1
            except ApiError as exc:
                if exc.status == 409:  # the attempt ended: nobody is listening any more
                    log.warning("crucible: heartbeats stopped: %s", exc)
                    return
                if not self._warned:
                    self._warned = True
                    log.warning("crucible: heartbeat failed (%s); will keep trying", exc)
            if self._stopped.wait(self._interval):
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5.0)
