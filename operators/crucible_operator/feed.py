"""What changes in the control plane reaches the reconcile loops through one feed.

Without it every loop asked the control plane about its run on every pass, and about new
events every 10 s while running: at scale that polling was most of the control plane's
work (docs/scaling.md measured it). Every change a loop must react to records a run event
(phase moves: cancel, recovery, the watchdog; preempt requests; new checkpoints), so one
follower of GET /api/v1/events marks the changed runs and wakes their loops; the loops then
read their run only when it changed, and otherwise reuse their last answer.

Two kinds of event carry all a loop needs, so they wake it without marking the run changed
(no read): a new checkpoint (its id, step and uri, for the resource's status) and a preempt
request (the attempt to drain). Events the loop's last answer already shows change nothing
either: most phase moves and attempt starts are the loop's own reports coming back, and a
checkpoint's eval scores are read by the EvalJob's loop when it ends. A loop trusts the feed
for checkpoints and preempt requests only once it covers the loop's own last look
(`RunChanges.covers`): the feed starts "now", so what happened before its first answer, or
while it was not answering, is read from the API as before.

Events can become visible out of id order (two transactions commit in the other order than
their ids were drawn), so each poll reaches back OVERLAP ids behind the cursor and skips
events already seen. If the feed fails, `RunChanges.healthy()` turns False and the loops go
back to reading their run on every pass.
"""

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from crucible.client import calls
from crucible.client.calls import Call
from crucible.domain import reasons
from crucible.schemas.runs import EventFeed, RunEventPublic

log = logging.getLogger(__name__)

FEED_SECONDS = 1.0
PAGE = 1000
OVERLAP = 500
REMEMBERED = 20_000  # event ids kept to skip the overlap's repeats
HEALTHY_WITHIN = 10.0  # seconds since the feed last answered


@dataclass(frozen=True)
class CheckpointSeen:
    id: int
    step: int
    uri: str


@dataclass(frozen=True)
class Known:
    """A run as its loop's last answer from the control plane showed it."""

    phase: str
    attempts: int


@dataclass
class RunChanges:
    """What the follower tells the loops: which of their runs changed since they read them,
    and the checkpoints and preempt requests it saw for them since they last took those."""

    uids: dict[int, str] = field(default_factory=dict)  # run id -> its resource's uid
    changed: set[int] = field(default_factory=set)  # run ids
    checkpoints: dict[int, CheckpointSeen] = field(default_factory=dict)  # highest step seen
    preempt_requests: dict[int, set[int]] = field(default_factory=dict)  # run id -> attempts
    known: dict[int, Known] = field(default_factory=dict)  # told by the loops
    answered_at: float = float("-inf")  # time.monotonic() of the feed's last answer
    first_answered_at: float | None = None  # from then on the feed has every event

    def healthy(self) -> bool:
        return time.monotonic() - self.answered_at < HEALTHY_WITHIN

    def covers(self, looked_at: float | None) -> bool:
        """Whether a loop that last read its run's checkpoints or events from the API at
        `looked_at` (time.monotonic()) learns what happened since from the feed alone: the
        feed answered first before that look and is answering now."""
        return (
            looked_at is not None
            and self.first_answered_at is not None
            and self.first_answered_at <= looked_at
            and self.healthy()
        )

    def forget(self, run_id: int) -> None:
        """The run's resource is gone from this operator."""
        self.uids.pop(run_id, None)
        self.changed.discard(run_id)
        self.checkpoints.pop(run_id, None)
        self.preempt_requests.pop(run_id, None)
        self.known.pop(run_id, None)

    def note(self, event: RunEventPublic) -> bool:
        """Take in one event of a run this operator reconciles; whether to wake its loop."""
        if self._already_known(event):
            return False
        if event.type == reasons.EVENT_CHECKPOINT_REGISTERED:
            seen = CheckpointSeen(
                int(event.data["checkpoint_id"]), int(event.data["step"]), str(event.data["uri"])
            )
            kept = self.checkpoints.get(event.run_id)
            if kept is None or seen.step > kept.step:
                self.checkpoints[event.run_id] = seen
        elif event.type == reasons.EVENT_PREEMPT_REQUESTED:
            attempt = event.data.get("attempt")  # None: asked while no attempt was open
            if isinstance(attempt, int):
                self.preempt_requests.setdefault(event.run_id, set()).add(attempt)
        else:
            self.changed.add(event.run_id)
        return True

    def _already_known(self, event: RunEventPublic) -> bool:
        if event.type == reasons.EVENT_EVAL_RESULT_RECORDED:
            return True  # recorded on the checkpoint's run, whose loop shows no scores
        known = self.known.get(event.run_id)
        if known is None:
            return False
        if event.type == reasons.EVENT_PHASE_CHANGED:
            return event.data.get("phase") == known.phase
        if event.type == reasons.EVENT_ATTEMPT_STARTED:
            attempt = event.data.get("attempt")
            return isinstance(attempt, int) and attempt <= known.attempts
        return False


class EventSource(Protocol):
    async def send(self, call: Call[EventFeed]) -> EventFeed: ...


class EventFollower:
    def __init__(self, api: EventSource, changes: RunChanges, wake: Callable[[str], None]) -> None:
        self.api = api
        self.changes = changes
        self.wake = wake
        self.cursor: int | None = None
        self.seen: OrderedDict[int, None] = OrderedDict()

    async def poll(self) -> bool:
        """One page; whether it was full (more to read at once)."""
        after = None if self.cursor is None else max(0, self.cursor - OVERLAP)
        page = await self.api.send(calls.event_feed(after, PAGE))
        self.changes.answered_at = time.monotonic()
        if self.changes.first_answered_at is None:
            self.changes.first_answered_at = self.changes.answered_at
        woken = set()
        for event in page.items:
            if event.id in self.seen:
                continue
            self.seen[event.id] = None
            uid = self.changes.uids.get(event.run_id)
            if uid is not None and self.changes.note(event):  # a run this operator reconciles
                woken.add(uid)
        for uid in woken:
            self.wake(uid)
        while len(self.seen) > REMEMBERED:
            self.seen.popitem(last=False)
        self.cursor = max(self.cursor or 0, page.next_after_id)
        return len(page.items) == PAGE

    async def follow(self) -> None:
        """Runs until cancelled (at the operator's clean-up)."""
        while True:
            try:
                more = await self.poll()
            except Exception as exc:  # the API restarting, a timeout: loops poll meanwhile
                log.warning("event feed failed, retrying in %.0f s: %s", FEED_SECONDS, exc)
                more = False
            if not more:
                await asyncio.sleep(FEED_SECONDS)
