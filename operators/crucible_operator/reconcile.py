"""One reconcile pass of one custom resource: level-based, from what is observed now.

The control plane holds the run's record (phase, attempts, recovery's decisions); the
cluster holds the pods. A pass reads both, makes the one next move that brings them
together, writes the resource's status once if it changed, then emits Events. Every move is
idempotent (deterministic pod names, attempt reports keyed by number, registration keyed
by uid), so a pass cut short by a crash is simply done again by the next operator.

The next move, by the run's phase in the control plane:
- terminal: stop whatever pods are left (and end their attempt); the loop ends.
- no open attempt: resolve inputs (WaitingForInputs until they exist); once Scheduling is
  due (first attempt, or recovery's next one after its backoff) start the attempt and
  create its pods behind the gang gate;
- open attempt: create missing pods, lift the gang gate when all of them fit, report
  Running when all run, and when the attempt ends (judged by outcome.judge) stop the rest,
  wait until every pod has stopped (a preempted workload is still writing its checkpoint),
  then report the end: Succeeded, or Interrupted for recovery to decide.
"""

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import kopf
from lightkube import ApiError as KubeError
from lightkube import codecs
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from crucible.client import ApiError
from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.schemas.runs import AttemptEnd, PhaseReport, RunPublic
from crucible_operator import gang, outcome, pods, registration
from crucible_operator.context import RESOURCES, OperatorContext
from crucible_operator.facts import Demand, NodeFacts, PodFacts, pod_facts
from crucible_operator.feed import CheckpointSeen, Known
from crucible_operator.status import Condition, build_status, changed

log = logging.getLogger(__name__)

# Seconds until the next pass when nothing wakes the loop sooner (pod events do).
POLL_WAITING = 2.0  # on the control plane: inputs, backoff, recovery deciding
POLL_CLUSTER = 10.0  # on the cluster, whose events wake the loop: a rare safety net
POLL_RUNNING = 10.0  # cancel / preempt requests arrive through the API (and its feed)
POLL_SOON = 0.5
# A pass reuses the last answer about its run instead of asking again while the event feed
# (feed.py) has not marked the run changed and the answer is younger than this; without a
# working feed, younger than RUN_FRESH_SECONDS (the passes a burst of pod events causes
# then need one read, not one each, and API changes are seen at most that much later).
FEED_TRUSTED_SECONDS = 60.0
RUN_FRESH_SECONDS = 1.0


@dataclass
class Tracked:
    """What one resource's loop remembers between passes (rebuilt after a restart)."""

    run_id: int | None = None
    attempts_known: bool = False
    open_attempt: int | None = None
    started: bool = False  # the open attempt was seen running
    stopping: outcome.Outcome | None = None  # why we are stopping the open attempt
    seen_event_id: int = 0
    events_read_at: float | None = None  # time.monotonic() of the last read of its events
    scheduled: Condition | None = None
    last_phase: str = ""
    latest_step: int | None = None
    checkpoint_read_at: float | None = None  # ... and of its latest checkpoint
    last_read: tuple[RunPublic, float] | None = None  # the last answer, at time.monotonic()


@dataclass(frozen=True)
class Observed:
    """The cluster as the indexes show it."""

    pods: Sequence[PodFacts]  # this resource's pods, every attempt
    nodes: Mapping[str, NodeFacts]
    # Capacity in use, only when asked for (`observe(capacity=True)`): every node's and
    # every pod's facts are walked for it, which only the gang check needs.
    bound: Mapping[str, Demand] = field(default_factory=dict)  # per node, non-terminal pods
    released: Iterable[Demand] = ()  # pods ungated but not bound yet, cluster-wide


class Observe(Protocol):
    def __call__(self, *, capacity: bool = False) -> Observed: ...


class Pass:
    def __init__(
        self,
        ctx: OperatorContext,
        owner: kopf.Body,
        tracked: Tracked,
        observe: Observe,
    ) -> None:
        self.ctx = ctx
        self.owner = owner  # kopf's live view, for adopt() and events
        body: dict[str, Any] = dict(owner)  # a snapshot: one pass sees one version
        self.body = body
        self.kind = body["kind"]
        self.meta = body["metadata"]
        self.spec = body.get("spec") or {}
        self.tracked = tracked
        self.observe = observe
        self.seen = observe()
        self.events: list[tuple[str, str, str]] = []  # emitted after the status write
        self.results: dict[str, float] | None = None
        self.latest: RunPublic | None = None  # the run as the last answer showed it
        self.stale = False  # something changed it that no answer showed
        self.latest_checkpoint: dict[str, Any] | None = None
        self.read_at = time.monotonic()  # when the control plane last answered about the run

    # -- the pass ------------------------------------------------------------------------

    async def run(self) -> float | None:
        """Returns seconds until the next pass, or None when the resource needs no more."""
        run = await self._registered()
        if run is None:
            return None
        self.latest = run
        if not self.tracked.attempts_known:
            await self._load_attempts(run)
        delay = await self._step(run)
        # Every report answers with the run as it now is; re-read only what changed elsewhere.
        run = self.latest
        if self.stale:
            run = await self._read(run.id)
        await self._write_status(run)
        self.tracked.last_read = (run, self.read_at)
        self._know(run)
        return None if run.phase.is_terminal and self.tracked.open_attempt is None else delay

    async def _step(self, run: RunPublic) -> float | None:
        phase = run.phase
        attempt = self.tracked.open_attempt
        await self._delete_stale_pods()
        if phase.is_terminal:
            await self._stop_after_end(run)
            return POLL_SOON if self.tracked.open_attempt is not None else None
        if attempt is None:
            return await self._between_attempts(run)
        if phase not in (Phase.Scheduling, Phase.Running):
            # Judged from outside (the heartbeat watchdog): stop the pods, re-read attempts.
            await self._stop_pods(self._attempt_pods(), grace=None)
            self.tracked.attempts_known = False
            return POLL_SOON
        return await self._during_attempt(run, attempt)

    # -- registration --------------------------------------------------------------------

    async def _registered(self) -> RunPublic | None:
        run_id = self.tracked.run_id or (self.body.get("status") or {}).get("runId")
        last = self.tracked.last_read
        if last is not None and self._still_current(last[1]):
            self.read_at = last[1]
            return last[0]
        if run_id:
            try:
                run: RunPublic = await self._read(int(run_id))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                # A control plane that never heard of it (restored from an older backup,
                # or another one): register again, by uid, like a new resource.
                log.warning(
                    "run %s of %s is unknown to the control plane", run_id, self.meta["name"]
                )
            else:
                self._learn(run)
                return run
        try:
            run = await registration.register(self.ctx, self.body)
        except registration.RegistrationRefused as exc:
            await self._patch_status(
                {
                    "phase": Phase.Failed.value,
                    "conditions": [
                        {
                            "type": reasons.CONDITION_READY,
                            "status": "False",
                            "reason": reasons.REASON_INVALID_SPEC,
                            "message": str(exc)[:32768],
                            "lastTransitionTime": _now_stamp(),
                        }
                    ],
                }
            )
            self._emit("Warning", reasons.REASON_INVALID_SPEC, str(exc))
            self._flush_events()
            return None
        self._learn(run)
        self._emit("Normal", "Registered", f"run {run.id} in the control plane")
        return run

    def _still_current(self, read_at: float) -> bool:
        run_id = self.tracked.run_id
        if run_id is None or run_id in self.ctx.changes.changed:
            return False
        trusted = FEED_TRUSTED_SECONDS if self.ctx.changes.healthy() else RUN_FRESH_SECONDS
        return time.monotonic() - read_at < trusted

    async def _read(self, run_id: int) -> RunPublic:
        self.ctx.changes.changed.discard(run_id)  # a change from now on marks it again
        run: RunPublic = await self.ctx.call(self.ctx.api.get_run, run_id)
        self.read_at = time.monotonic()
        self._know(run)
        return run

    def _learn(self, run: RunPublic) -> None:
        self.tracked.run_id = run.id
        self.ctx.changes.uids[run.id] = self.meta["uid"]
        self._know(run)

    def _know(self, run: RunPublic) -> None:
        """Tell the event follower what this loop's latest answer shows, as soon as it has
        it, so that the events of its own reports do not make it read the run again."""
        self.ctx.changes.known[run.id] = Known(run.phase.value, run.attempt_count)

    async def _load_attempts(self, run: RunPublic) -> None:
        attempts = (
            await self.ctx.call(self.ctx.api.list_attempts, run.id) if run.attempt_count else []
        )
        last = attempts[-1] if attempts else None
        self.tracked.open_attempt = last.number if last and last.ended_at is None else None
        self.tracked.started = (
            any(p.phase == "Running" for p in self._attempt_pods()) or run.phase is Phase.Running
        )
        self.tracked.attempts_known = True

    # -- between attempts ------------------------------------------------------------------

    async def _between_attempts(self, run: RunPublic) -> float | None:
        if run.phase in (Phase.Interrupted, Phase.Recovering):
            return POLL_WAITING  # recovery decides: another attempt, or Failed
        inputs = run.resolved_inputs
        if inputs is None:
            resolution = await self.ctx.call(self.ctx.api.resolve_inputs, run.id)
            self.stale = True  # pinned inputs, or a phase moved to WaitingForInputs/Failed
            if not resolution.ready:
                return POLL_WAITING
            inputs = {
                "datasets": resolution.datasets,
                "checkpoint": resolution.checkpoint,
                "artifacts": resolution.artifacts,
            }
        if run.attempt_count > 0:
            if run.phase is not Phase.Scheduling:
                return POLL_WAITING
            if run.next_attempt_at is not None:
                due = _aware(run.next_attempt_at)
                if due > datetime.now(UTC):
                    return min(max((due - datetime.now(UTC)).total_seconds(), 0.1), POLL_WAITING)
        project = await registration.project_for(self.ctx, self.meta["namespace"])
        await registration.ensure_token_secret(self.ctx, self.meta["namespace"], project)
        if run.phase is not Phase.Scheduling:
            await self._report(run, Phase.Scheduling, "", "creating the attempt's pods")
        start = run.next_attempt_start()
        try:
            attempt = await self.ctx.call(self.ctx.api.start_attempt, run.id, start)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.tracked.attempts_known = False  # one is open already: re-read
            return POLL_SOON
        if self.latest is not None:
            self.latest = self.latest.model_copy(update={"attempt_count": attempt.number})
            self._know(self.latest)
        self.tracked.open_attempt = attempt.number
        self.tracked.started = False
        self.tracked.stopping = None
        resume = start.resumed_from_checkpoint_id
        await self._create_pods(run, attempt.number, resume, inputs)
        detail = f" resuming from checkpoint {resume}" if resume else ""
        self._emit("Normal", "AttemptStarted", f"attempt {attempt.number} ({start.reason}){detail}")
        return POLL_SOON

    # -- during an attempt -----------------------------------------------------------------

    async def _during_attempt(self, run: RunPublic, number: int) -> float | None:
        mine = self._attempt_pods()
        expected = pods.shape(self.kind, self.spec).pods
        if self.tracked.stopping is None and run.phase is Phase.Running:
            await self._check_preempt_requests(run, number, mine)
        if self.tracked.stopping is None:
            if not self.tracked.started and len(mine) < expected:
                inputs = run.resolved_inputs or {"datasets": [], "checkpoint": None}
                resume = run.resume_checkpoint_id if run.attempt_count > 1 else None
                await self._create_pods(run, number, resume, inputs)
                return POLL_SOON
            verdict = outcome.judge(mine, expected, self.seen.nodes, started=self.tracked.started)
        else:
            verdict = self.tracked.stopping
        if verdict.state.ended:
            return await self._end_attempt(run, number, verdict, mine)
        if verdict.state is outcome.State.gated:
            return await self._release_gang(run, mine, expected)
        if verdict.state is outcome.State.scheduling:
            message = verdict.message or "waiting for the scheduler to bind the pods"
            self.tracked.scheduled = Condition(
                reasons.CONDITION_SCHEDULED, False, verdict.reason or "Pending", message
            )
            await self._report(run, Phase.Scheduling, verdict.reason or "", message)
            return POLL_CLUSTER
        self.tracked.scheduled = Condition(
            reasons.CONDITION_SCHEDULED, True, "AllPodsBound", f"{expected} pod(s) bound"
        )
        if verdict.state is outcome.State.running:
            self.tracked.started = True
            if run.phase is not Phase.Running:
                await self._report(run, Phase.Running, "", f"attempt {number}: all pods running")
                self._emit("Normal", "Running", f"attempt {number}: {expected} pod(s) running")
            return POLL_RUNNING
        return POLL_CLUSTER  # starting: bound, containers not all running yet

    async def _release_gang(self, run: RunPublic, mine: Sequence[PodFacts], expected: int) -> float:
        gated = [pod for pod in mine if pod.gated]
        sample = pods.build_pods(
            self.body, self.kind, pods.Attempt(run.id, 0, None, None), self.ctx.options
        )[0]["spec"]
        placement = self._place(expected, sample)
        if placement.fits:
            for pod in gated:
                self.ctx.reservations.hold((pod.namespace, pod.name), pod.demand)
            try:
                await asyncio.gather(*(self._lift_gate(pod) for pod in gated))
            except Exception:
                for pod in gated:
                    self.ctx.reservations.drop((pod.namespace, pod.name))
                raise
            self.tracked.scheduled = Condition(
                reasons.CONDITION_SCHEDULED, None, "GangReleased", placement.message
            )
            return POLL_SOON
        self.tracked.scheduled = Condition(
            reasons.CONDITION_SCHEDULED, False, reasons.REASON_UNSCHEDULABLE, placement.message
        )
        if run.reason != reasons.REASON_UNSCHEDULABLE:
            self._emit("Warning", reasons.REASON_UNSCHEDULABLE, placement.message)
        await self._report(run, Phase.Scheduling, reasons.REASON_UNSCHEDULABLE, placement.message)
        return POLL_CLUSTER  # freed capacity wakes gated runs (handlers.pod_changed)

    def _place(self, size: int, sample: Mapping[str, Any]) -> gang.Placement:
        """Does a gang of `size` pods like `sample` (a pod spec) fit now, after every pod
        bound or placed before it? A caller that acts on a fit reserves the pods before its first
        await (the event loop runs one coroutine at a time, so no other gang is checked in
        between and two never count the same free GPUs)."""
        want = gang.Gang(
            size=size,
            demand=_demand_of(sample),
            node_selector=sample.get("nodeSelector") or {},
            tolerations=[
                gang.Toleration(
                    key=t.get("key") or "",
                    operator=t.get("operator") or "Equal",
                    value=t.get("value") or "",
                    effect=t.get("effect") or "",
                )
                for t in sample.get("tolerations") or []
            ],
        )
        self.seen = self.observe(capacity=True)
        return gang.fit(
            want,
            self.seen.nodes.values(),
            self.seen.bound,
            [*self.seen.released, *self.ctx.reservations.demands()],
            self.ctx.eligibility,
        )

    async def _lift_gate(self, pod: PodFacts) -> None:
        await self.ctx.kube.patch(
            Pod,
            pod.name,
            {"spec": {"schedulingGates": []}},
            namespace=pod.namespace,
            patch_type=PatchType.MERGE,
        )

    async def _check_preempt_requests(
        self, run: RunPublic, number: int, mine: Sequence[PodFacts]
    ) -> None:
        """`crucible runs preempt` on a Kubernetes run: delete its pods as a drain would
        (SIGTERM, the grace period to checkpoint). The requests come from the event feed once
        it covers the last read of the run's events; otherwise from that read, repeated each
        pass until the feed covers it (a request no longer marks the run changed)."""
        from_feed = self.ctx.changes.covers(self.tracked.events_read_at)
        asked: set[object]
        if from_feed:
            asked = set(self.ctx.changes.preempt_requests.get(run.id, ()))
        else:
            read_at = time.monotonic()
            events = await self.ctx.call(
                self.ctx.api.list_events, run.id, after_id=self.tracked.seen_event_id
            )
            self.tracked.events_read_at = read_at
            if events:
                self.tracked.seen_event_id = events[-1].id
            asked = {
                e.data.get("attempt") for e in events if e.type == reasons.EVENT_PREEMPT_REQUESTED
            }
        if number in asked:
            self.tracked.stopping = outcome.Outcome(
                outcome.State.interrupted,
                reasons.REASON_PREEMPTED,
                None,
                f"attempt {number} preempted on request",
            )
            await self._stop_pods(mine, grace=None)
            self._emit("Normal", reasons.EVENT_PREEMPT_REQUESTED, f"draining attempt {number}")
        if from_feed:  # taken once acted on: a failed pass sees the request again
            self.ctx.changes.preempt_requests.pop(run.id, None)

    async def _end_attempt(
        self, run: RunPublic, number: int, verdict: outcome.Outcome, mine: Sequence[PodFacts]
    ) -> float:
        if verdict.state is not outcome.State.succeeded:
            self.tracked.stopping = verdict
            await self._stop_pods(mine, grace=None)
            if not self._quiet(mine):
                return POLL_WAITING  # the workload is still checkpointing; wait for it
        await self._report_end(run, number, verdict)
        if verdict.state is outcome.State.succeeded:
            await self._report(run, Phase.Succeeded, reasons.REASON_COMPLETED, "")
            self._emit("Normal", reasons.REASON_COMPLETED, f"attempt {number} succeeded")
            self.results = await self._eval_results(run)
        else:
            await self._report(run, Phase.Interrupted, verdict.reason, verdict.message)
            self._emit("Warning", verdict.reason, verdict.message)
        self.tracked.open_attempt = None
        self.tracked.stopping = None
        self.tracked.started = False
        self.ctx.metrics.attempt_ends.labels(self.kind, verdict.reason).inc()
        if self.latest is not None and self.latest.phase is Phase.Scheduling:
            return 0.0  # the report's answer is recovery's: the next attempt is due now
        return POLL_SOON

    async def _stop_after_end(self, run: RunPublic) -> None:
        """A terminal run (cancelled, or failed by recovery or the watchdog) keeps no pods."""
        mine = self._attempt_pods()
        live = [p for p in self.seen.pods if not p.terminal]
        await self._stop_pods(live, grace=None)
        number = self.tracked.open_attempt
        if number is None:
            return
        if live and not self._quiet(mine):
            return
        reason = (
            reasons.REASON_CANCELLED_BY_USER if run.phase is Phase.Cancelled else run.reason
        ) or run.phase.value
        await self._report_end(
            run, number, outcome.Outcome(outcome.State.failed, reason, None, run.message)
        )
        self.tracked.open_attempt = None

    # -- pods --------------------------------------------------------------------------------

    def _attempt_pods(self) -> list[PodFacts]:
        number = self.tracked.open_attempt
        return [p for p in self.seen.pods if number is not None and p.attempt == number]

    def _quiet(self, mine: Sequence[PodFacts]) -> bool:
        """Every pod stopped: terminal, gone, or on a lost node (which will never say)."""
        return all(
            p.terminal or p.gated or (p.node is not None and not self._node_ok(p.node))
            for p in mine
        )

    def _node_ok(self, name: str) -> bool:
        node = self.seen.nodes.get(name)
        return node is not None and node.ready

    async def _create_pods(
        self, run: RunPublic, number: int, resume: int | None, inputs: Mapping[str, Any] | None
    ) -> None:
        attempt = pods.Attempt(run.id, number, resume, inputs)
        built = pods.build_pods(self.body, self.kind, attempt, self.ctx.options)
        if len(built) > 1:
            service = pods.build_service(self.body, self.kind)
            kopf.adopt(service, owner=self.owner)
            await self._create(service)
        existing = {p.name for p in self.seen.pods}
        missing = [pod for pod in built if pod["metadata"]["name"] not in existing]
        placed = self._place_now(built) if len(missing) == len(built) else []
        try:
            for pod in missing:
                kopf.adopt(pod, owner=self.owner)
                if await self._create(pod):
                    self.ctx.metrics.pods_created.labels(self.kind).inc()
        except Exception:
            for key in placed:
                self.ctx.reservations.drop(key)
            raise

    def _place_now(self, built: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """A new gang that fits already is created without its gate (reserved as placed),
        saving the gated pods' round trip: create, wait for the index, lift each gate.
        Returns the reserved pods' keys; none when it does not fit (created gated, then)."""
        if not all(pod["spec"].get("schedulingGates") for pod in built):
            return []  # admitted by Kueue, not by our gate
        placement = self._place(len(built), built[0]["spec"])
        if not placement.fits:
            return []
        keys = []
        for pod in built:
            del pod["spec"]["schedulingGates"]
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.ctx.reservations.hold(key, _demand_of(pod["spec"]))
            keys.append(key)
        self.tracked.scheduled = Condition(
            reasons.CONDITION_SCHEDULED, None, "GangReleased", placement.message
        )
        return keys

    async def _create(self, obj: dict[str, Any]) -> bool:
        try:
            await self.ctx.kube.create(codecs.from_dict(obj))
        except KubeError as exc:
            if exc.status.code == 409:
                return False  # created by an earlier pass (or operator) already
            raise
        return True

    async def _stop_pods(self, victims: Iterable[PodFacts], grace: int | None) -> None:
        for pod in victims:
            if pod.terminal or pod.deleting:
                continue
            if pod.node is not None and not self._node_ok(pod.node):
                grace = 0  # its kubelet is gone and cannot confirm a graceful stop
            try:
                await self.ctx.kube.delete(
                    Pod, pod.name, namespace=pod.namespace, grace_period=grace
                )
            except KubeError as exc:
                if exc.status.code != 404:
                    raise

    async def _delete_stale_pods(self) -> None:
        """Pods of attempts other than the open one (left by a crash mid-transition)."""
        number = self.tracked.open_attempt
        stale = [p for p in self.seen.pods if p.attempt != number and not p.terminal]
        await self._stop_pods(stale, grace=None)

    # -- control plane -----------------------------------------------------------------------

    async def _report(self, run: RunPublic, phase: Phase, reason: str, message: str) -> None:
        if run.phase is phase and run.reason == reason and run.message == message[:4000]:
            return
        try:
            self.latest = await self.ctx.call(
                self.ctx.api.report_phase,
                run.id,
                PhaseReport(phase=phase, reason=reason, message=message[:4000]),
            )
            self.read_at = time.monotonic()
            self._know(self.latest)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.stale = True
            log.info("run %s: phase report %s refused: %s", run.id, phase, exc)

    async def _report_end(self, run: RunPublic, number: int, verdict: outcome.Outcome) -> None:
        try:
            await self.ctx.call(
                self.ctx.api.end_attempt,
                run.id,
                number,
                AttemptEnd(
                    end_reason=verdict.reason or reasons.REASON_ERROR_EXIT,
                    exit_code=verdict.exit_code,
                    message=verdict.message[:4000],
                ),
            )
        except ApiError as exc:
            if exc.status != 409:
                raise  # 409: already ended (by the watchdog, or by this pass before a crash)

    async def _eval_results(self, run: RunPublic) -> dict[str, float] | None:
        if self.kind != "EvalJob":
            return None
        checkpoint = (run.resolved_inputs or {}).get("checkpoint")
        if checkpoint is None:
            return None
        results = await self.ctx.call(self.ctx.api.list_checkpoint_evals, int(checkpoint))
        scores: dict[str, float] = {}
        for result in results:
            if result.eval_run_id == run.id:
                scores.update({key: float(value) for key, value in result.scores.items()})
        return scores

    # -- status ------------------------------------------------------------------------------

    async def _write_status(self, run: RunPublic) -> None:
        old = self.body.get("status") or {}
        seen = self.ctx.changes.checkpoints.get(run.id)  # taken once the status shows it
        if run.kind == "train":
            newest = await self._newest_checkpoint(run, seen)
            shown = old.get("latestCheckpoint") or {}
            if newest is not None and newest.step > shown.get("step", -1):
                self.latest_checkpoint = {"id": newest.id, "step": newest.step, "uri": newest.uri}
        if self.kind == "EvalJob" and run.phase is Phase.Succeeded and "results" not in old:
            self.results = self.results or await self._eval_results(run)
        status = build_status(
            run=run,
            old=old,
            generation=int(self.meta.get("generation") or 0),
            scheduled=self.tracked.scheduled,
            latest_checkpoint=self.latest_checkpoint,
            results=self.results,
            now=datetime.now(UTC),
        )
        if changed(old, status):
            await self._patch_status(status)
        if seen is not None and self.ctx.changes.checkpoints.get(run.id) is seen:
            del self.ctx.changes.checkpoints[run.id]
        if run.phase.value != self.tracked.last_phase:
            self.ctx.metrics.phases[self.meta["uid"]] = (self.kind, run.phase.value)
            self.tracked.last_phase = run.phase.value
        self._flush_events()

    async def _newest_checkpoint(
        self, run: RunPublic, seen: CheckpointSeen | None
    ) -> CheckpointSeen | None:
        """The highest-step checkpoint registered since the status was last written: `seen`
        by the event feed once it covers the last look-up; else looked up when the run's
        latest step moved (which it also does with metrics) or never was."""
        tracked = self.tracked
        if self.ctx.changes.covers(tracked.checkpoint_read_at):
            return seen
        if tracked.checkpoint_read_at is not None and run.latest_step == tracked.latest_step:
            return seen
        read_at = time.monotonic()
        checkpoint = await self.ctx.call(self.ctx.api.latest_checkpoint, run.id)
        tracked.checkpoint_read_at, tracked.latest_step = read_at, run.latest_step
        if checkpoint is None:
            return seen
        looked_up = CheckpointSeen(checkpoint.id, checkpoint.step, checkpoint.uri)
        return seen if seen is not None and seen.step > looked_up.step else looked_up

    async def _patch_status(self, status: Mapping[str, Any]) -> None:
        resource = RESOURCES[self.kind]
        try:
            await self.ctx.kube.patch(
                resource.Status,
                self.meta["name"],
                {"status": dict(status)},
                namespace=self.meta["namespace"],
                patch_type=PatchType.MERGE,
            )
        except KubeError as exc:
            if exc.status.code != 404:  # deleted meanwhile: nothing to write to
                raise

    def _emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def _flush_events(self) -> None:
        """Events go out after the status they describe was written."""
        for type_, reason, message in self.events:
            kopf.event(self.owner, type=type_, reason=reason, message=message[:1024])
        self.events.clear()


def _demand_of(pod_spec: Mapping[str, Any]) -> Demand:
    return pod_facts({"spec": pod_spec}).demand


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
