"""One reconcile loop's view of its run in the control plane.

A loop asks about its run only when it must: the last answer is reused while the event
feed (feed.py) has not marked the run changed and the answer is younger than
FEED_TRUSTED_SECONDS; without a working feed, younger than RUN_FRESH_SECONDS (the passes a
burst of pod events causes then need one read, not one each, and API changes are seen at
most that much later). Every report the loop makes answers with the run as it now is, so a
report refreshes the view too. New checkpoints and preempt requests come from the feed once
it covers the loop's own last look at them, else from the API as before.

Whatever the view learns it tells the feed (`RunChanges.known`), so that the events of the
loop's own reports do not mark the run changed again.
"""

import time

from crucible.client import ApiError, calls
from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.schemas.runs import AttemptEnd, PhaseReport, RunPublic
from crucible_operator.context import OperatorContext
from crucible_operator.feed import CheckpointSeen, Known

FEED_TRUSTED_SECONDS = 60.0
RUN_FRESH_SECONDS = 1.0
MESSAGE_LIMIT = 4000  # characters of a reason's message the API keeps


class RunView:
    def __init__(self, ctx: OperatorContext, uid: str) -> None:
        self.ctx = ctx
        self.uid = uid
        self.run_id: int | None = None
        self.latest: RunPublic | None = None  # the last answer
        self.read_at = float("-inf")  # time.monotonic() of it
        self.stale = False  # changed by a call whose answer did not show the run
        self._seen_event_id = 0
        self._events_read_at: float | None = None  # the last read of its events from the API
        self._checkpoint_read_at: float | None = None  # ... and of its latest checkpoint
        self._step_at_checkpoint_read: int | None = None
        self._feed_checkpoint: CheckpointSeen | None = None  # taken once the status shows it
        self._preempt_from_feed = False  # the last look at preempt requests was the feed's

    # -- answers -------------------------------------------------------------------------

    def current(self) -> RunPublic | None:
        """The last answer while it can be trusted, else None (ask again)."""
        if self.latest is None or self.run_id is None or self.run_id in self.ctx.changes.changed:
            return None
        healthy = self.ctx.changes.healthy()
        trusted = FEED_TRUSTED_SECONDS if healthy else RUN_FRESH_SECONDS
        return self.latest if time.monotonic() - self.read_at < trusted else None

    async def read(self, run_id: int) -> RunPublic:
        self.ctx.changes.changed.discard(run_id)  # a change from now on marks it again
        read_at = time.monotonic()
        run = await self.ctx.call(calls.get_run(run_id))
        self.learn(run, read_at)
        return run

    async def fresh(self) -> RunPublic:
        """The run after a pass: the last answer, read again if a call changed it unseen."""
        assert self.latest is not None
        if self.stale:
            self.stale = False
            return await self.read(self.latest.id)
        return self.latest

    def learn(self, run: RunPublic, read_at: float | None = None) -> None:
        if self.run_id != run.id:
            self.run_id = run.id
            self.ctx.changes.uids[run.id] = self.uid
        self.latest = run
        self.read_at = time.monotonic() if read_at is None else read_at
        self.ctx.changes.known[run.id] = Known(run.phase.value, run.attempt_count)

    def doubt(self) -> None:
        """A pass failed part-way: it may have changed the run; ask next time."""
        self.latest = None
        self.stale = False

    def forget(self) -> None:
        """The loop ends."""
        if self.run_id is not None:
            self.ctx.changes.forget(self.run_id)

    # -- reports -------------------------------------------------------------------------

    async def report(self, run: RunPublic, phase: Phase, reason: str, message: str) -> None:
        message = message[:MESSAGE_LIMIT]
        if run.phase is phase and run.reason == reason and run.message == message:
            return
        report = PhaseReport(phase=phase, reason=reason, message=message)
        try:
            self.learn(await self.ctx.call(calls.report_phase(run.id, report)))
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.stale = True

    async def end_attempt(self, run: RunPublic, number: int, end: AttemptEnd) -> None:
        try:
            await self.ctx.call(calls.end_attempt(run.id, number, end))
        except ApiError as exc:
            if exc.status != 409:
                raise  # 409: already ended (by the watchdog, or by this pass before a crash)

    def attempt_started(self, number: int) -> None:
        if self.latest is not None:
            self.learn(self.latest.model_copy(update={"attempt_count": number}), self.read_at)

    # -- what the feed hands over --------------------------------------------------------

    async def preempt_requested(self, run: RunPublic, number: int) -> bool:
        """`crucible runs preempt` asked to drain attempt `number`. From the feed once it
        covers the last read of the run's events; otherwise from that read, repeated each
        pass until the feed covers it (a request does not mark the run changed)."""
        changes = self.ctx.changes
        self._preempt_from_feed = changes.covers(self._events_read_at)
        if self._preempt_from_feed:
            return number in changes.preempt_requests.get(run.id, ())
        read_at = time.monotonic()
        events = await self.ctx.call(calls.list_events(run.id, self._seen_event_id))
        self._events_read_at = read_at
        if events:
            self._seen_event_id = events[-1].id
        asked = {e.data.get("attempt") for e in events if e.type == reasons.EVENT_PREEMPT_REQUESTED}
        return number in asked

    def preempt_taken(self, run: RunPublic) -> None:
        """The requests the feed handed over were acted on; taken only now, so that a pass
        that fails before sees them again."""
        if self._preempt_from_feed:
            self.ctx.changes.preempt_requests.pop(run.id, None)

    async def newest_checkpoint(self, run: RunPublic) -> CheckpointSeen | None:
        """The highest-step checkpoint registered since the status last showed one: seen by
        the feed once it covers the last look-up; else looked up when the run's latest step
        moved (which it also does with metrics) or never was."""
        seen = self._feed_checkpoint = self.ctx.changes.checkpoints.get(run.id)
        if self.ctx.changes.covers(self._checkpoint_read_at):
            return seen
        if (
            self._checkpoint_read_at is not None
            and run.latest_step == self._step_at_checkpoint_read
        ):
            return seen
        read_at = time.monotonic()
        checkpoint = await self.ctx.call(calls.latest_checkpoint(run.id))
        self._checkpoint_read_at, self._step_at_checkpoint_read = read_at, run.latest_step
        if checkpoint is None:
            return seen
        looked_up = CheckpointSeen(checkpoint.id, checkpoint.step, checkpoint.uri)
        return seen if seen is not None and seen.step > looked_up.step else looked_up

    def checkpoint_shown(self, run: RunPublic) -> None:
        """The status now shows what `newest_checkpoint` returned: the feed's record it
        came from is taken, unless a newer one arrived meanwhile."""
        seen, self._feed_checkpoint = self._feed_checkpoint, None
        if seen is not None and self.ctx.changes.checkpoints.get(run.id) is seen:
            del self.ctx.changes.checkpoints[run.id]

    async def eval_scores(self, run: RunPublic) -> dict[str, float] | None:
        """An EvalJob's scores, as recorded on the checkpoint it evaluated."""
        checkpoint = (run.resolved_inputs or {}).get("checkpoint")
        if checkpoint is None:
            return None
        results = await self.ctx.call(calls.list_checkpoint_evals(int(checkpoint)))
        scores: dict[str, float] = {}
        for result in results:
            if result.eval_run_id == run.id:
                scores.update({key: float(value) for key, value in result.scores.items()})
        return scores
