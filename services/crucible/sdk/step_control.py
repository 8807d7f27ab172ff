"""The run's side of the trainer's `StepControl` (domain/step_control.py): preemption and
live profile requests, agreed on by every rank in one collective per step.

`run.should_checkpoint()` already costs an all-reduce before every step; the profile
request rides in the same one instead of a second, so asking for profiles costs a step
nothing. Only rank 0 hears of requests (its heartbeat), so the others add zeros and the
maximum over the ranks is rank 0's request.
"""

from collections.abc import Callable

from crucible.domain.profile_requests import ProfileRequestState
from crucible.domain.step_control import BetweenSteps, ProfileOrder
from crucible.schemas.profiles import ProfileProgress
from crucible.sdk import distributed
from crucible.sdk.profile_requests import ProfileRequestMailbox


class RunStepControl:
    def __init__(
        self,
        *,
        preempted: Callable[[], bool],
        profile_requests: ProfileRequestMailbox | None,
        report_now: Callable[[], None],
    ) -> None:
        """profile_requests: rank 0's mailbox (None on the other ranks, and without
        heartbeats). report_now: sends progress without waiting for the next beat."""
        self._preempted = preempted
        self._profile_requests = profile_requests
        self._report_now = report_now
        self._windows: dict[int, tuple[int, int]] = {}

    def between_steps(self) -> BetweenSteps:
        order = self._profile_requests.take() if self._profile_requests is not None else None
        stop, request_id, steps = distributed.max_over_ranks(
            [int(self._preempted()), *((order.request_id, order.steps) if order else (0, 0))]
        )
        profile = ProfileOrder(request_id=request_id, steps=steps) if request_id else None
        return BetweenSteps(stop=bool(stop), profile=profile)

    def profile_started(self, request_id: int, first_step: int, last_step: int) -> None:
        self._windows[request_id] = (first_step, last_step)
        self._report(
            ProfileProgress(
                request_id=request_id,
                state=ProfileRequestState.started,
                first_step=first_step,
                last_step=last_step,
            )
        )

    def profile_done(self, request_id: int) -> None:
        # Each rank writes its own files: done once all have, so that whoever waits for the
        # request finds every rank's profile. Once per request, not per step.
        distributed.barrier()
        first_step, last_step = self._windows.pop(request_id)
        self._report(
            ProfileProgress(
                request_id=request_id,
                state=ProfileRequestState.done,
                first_step=first_step,
                last_step=last_step,
            )
        )

    def _report(self, progress: ProfileProgress) -> None:
        if self._profile_requests is not None:
            self._profile_requests.report(progress)
            self._report_now()
