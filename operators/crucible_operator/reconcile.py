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

What the pass knows of the run comes from its RunView (run_view.py), where the pods and
nodes are from kopf's index and the capacity placement keeps (gang.py), and its writes to
Kubernetes are cluster_writes.py's.
"""

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from crucible.client import ApiError, calls
from crucible.domain import reasons
from crucible.domain.enums import Phase
from crucible.schemas.runs import AttemptEnd, RunPublic
from crucible_operator import cluster_writes, gang, outcome, pods, registration, run_tokens
from crucible_operator.context import OperatorContext
from crucible_operator.facts import PodFacts, demand_of
from crucible_operator.run_view import RunView
from crucible_operator.status import Condition, aware, build_status, changed

log = logging.getLogger(__name__)

# Seconds until the next pass when nothing wakes the loop sooner (pod events do).
POLL_WAITING = 2.0  # on the control plane: inputs, backoff, recovery deciding
POLL_CLUSTER = 10.0  # on the cluster, whose events wake the loop: a rare safety net
POLL_RUNNING = 10.0  # cancel / preempt requests arrive through the API (and its feed)
POLL_SOON = 0.5


@dataclass
class Tracked:
    """What one resource's loop remembers between passes (rebuilt after a restart)."""

    view: RunView
    attempts_known: bool = False
    open_attempt: int | None = None
    started: bool = False  # the open attempt was seen running
    stopping: outcome.Outcome | None = None  # why we are stopping the open attempt
    scheduled: Condition | None = None
    last_phase: str = ""
    tokens: run_tokens.RunTokens = field(default_factory=run_tokens.RunTokens)


class Pass:
    def __init__(
        self, ctx: OperatorContext, owner: kopf.Body, tracked: Tracked, seen: Sequence[PodFacts]
    ) -> None:
        self.ctx = ctx
        self.owner = owner  # kopf's live view, for adopt() and events
        body: dict[str, Any] = dict(owner)  # a snapshot: one pass sees one version
        self.body = body
        self.kind = body["kind"]
        self.meta = body["metadata"]
        self.spec = body.get("spec") or {}
        self.tracked = tracked
        self.view = tracked.view
        self.pods = seen  # this resource's pods, every attempt
        self.nodes = ctx.capacity.nodes
        self.events: list[tuple[str, str, str]] = []  # emitted after the status write
        self.results: dict[str, float] | None = None
        self.latest_checkpoint: dict[str, Any] | None = None

    # -- the pass ------------------------------------------------------------------------

    async def run(self) -> float | None:
        """Returns seconds until the next pass, or None when the resource needs no more."""
        try:
            run = await self._registered()
            if run is None:
                return None
            if not self.tracked.attempts_known:
                await self._load_attempts(run)
            delay = await self._step(run)
            run = await self.view.fresh()
            if run.phase.is_terminal:
                # Before the status write, which ends this loop (kopf stops it on a terminal
                # phase); pods still stopping keep no use of the API for an ended run.
                await run_tokens.retire(
                    self.ctx,
                    namespace=self.meta["namespace"],
                    run_id=run.id,
                    known=self.tracked.tokens,
                )
            await self._write_status(run)
            return None if run.phase.is_terminal and self.tracked.open_attempt is None else delay
        finally:
            # An event is emitted once its fact is committed in the control plane, and no
            # later pass emits it again: it goes out even when this pass fails or is
            # cancelled after that (normally _write_status has sent it already).
            self._flush_events()

    async def _step(self, run: RunPublic) -> float | None:
        phase = run.phase
        attempt = self.tracked.open_attempt
        await self._stop([p for p in self.pods if p.attempt != attempt])  # left by a crash
        if phase.is_terminal:
            await self._stop_after_end(run)
            return POLL_SOON if self.tracked.open_attempt is not None else None
        if attempt is None:
            return await self._between_attempts(run)
        if phase not in (Phase.Scheduling, Phase.Running):
            # Judged from outside (the heartbeat watchdog): stop the pods, re-read attempts.
            await self._stop(self._attempt_pods())
            self.tracked.attempts_known = False
            return POLL_SOON
        return await self._during_attempt(run, attempt)

    async def _registered(self) -> RunPublic | None:
        """The run this resource is registered as: the last answer while current, else read
        by the id the status shows, else registered now."""
        run = self.view.current()
        if run is not None:
            return run
        run_id = self.view.run_id or (self.body.get("status") or {}).get("runId")
        if run_id:
            try:
                return await self.view.read(int(run_id))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                # A control plane that never heard of it (restored from an older backup,
                # or another one): register again, by uid, like a new resource.
                log.warning(
                    "run %s of %s is unknown to the control plane", run_id, self.meta["name"]
                )
        try:
            run = await registration.register(self.ctx, self.body)
        except registration.RegistrationRefused as exc:
            await cluster_writes.patch_status(
                self.ctx.kube, self.kind, self.meta, _refused_status(str(exc))
            )
            self._emit("Warning", reasons.REASON_INVALID_SPEC, str(exc))
            self._flush_events()
            return None
        self.view.learn(run)
        self._emit("Normal", "Registered", f"run {run.id} in the control plane")
        return run

    async def _load_attempts(self, run: RunPublic) -> None:
        attempts = await self.ctx.call(calls.list_attempts(run.id)) if run.attempt_count else []
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
            resolution = await self.ctx.call(calls.resolve_inputs(run.id))
            self.view.stale = True  # pinned inputs, or a phase moved to WaitingForInputs/Failed
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
                due = aware(run.next_attempt_at)
                if due > datetime.now(UTC):
                    return min(max((due - datetime.now(UTC)).total_seconds(), 0.1), POLL_WAITING)
        project = await registration.project_for(self.ctx, self.meta["namespace"])
        maybe_minted = run_tokens.minted_before(run.phase, run.attempt_count)
        if run.phase is not Phase.Scheduling:
            await self.view.report(run, Phase.Scheduling, "", "creating the attempt's pods")
        await run_tokens.issue(
            self.ctx,
            owner=self.owner,
            run_id=run.id,
            project=project,
            known=self.tracked.tokens,
            maybe_minted=maybe_minted,
        )
        start = run.next_attempt_start()
        try:
            attempt = await self.ctx.call(calls.start_attempt(run.id, start))
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.tracked.attempts_known = False  # one is open already: re-read
            return POLL_SOON
        self.view.attempt_started(attempt.number)
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
        expected = pods.shape(self.kind, self.spec).all_pods
        if self.tracked.stopping is None and run.phase is Phase.Running:
            await self._check_preempt_request(run, number, mine)
        if self.tracked.stopping is None:
            if not self.tracked.started and len(mine) < expected:
                inputs = run.resolved_inputs or {"datasets": [], "checkpoint": None}
                resume = run.resume_checkpoint_id if run.attempt_count > 1 else None
                await self._create_pods(run, number, resume, inputs)
                return POLL_SOON
            verdict = outcome.judge(mine, expected, self.nodes, started=self.tracked.started)
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
            await self.view.report(run, Phase.Scheduling, verdict.reason or "", message)
            return POLL_CLUSTER
        self.tracked.scheduled = Condition(
            reasons.CONDITION_SCHEDULED, True, "AllPodsBound", f"{expected} pod(s) bound"
        )
        if verdict.state is outcome.State.running:
            self.tracked.started = True
            if run.phase is not Phase.Running:
                message = f"attempt {number}: all pods running"
                await self.view.report(run, Phase.Running, "", message)
                self._emit("Normal", "Running", f"attempt {number}: {expected} pod(s) running")
            return POLL_RUNNING
        return POLL_CLUSTER  # starting: bound, containers not all running yet

    async def _release_gang(self, run: RunPublic, mine: Sequence[PodFacts], expected: int) -> float:
        gated = [pod for pod in mine if pod.gated]
        sample = pods.build_pods(
            self.body, self.kind, pods.Attempt(run.id, 0, None, None), self.ctx.options
        )[0]["spec"]
        capacity = self.ctx.capacity
        placement = capacity.fit(gang.Gang.of(expected, sample))
        if placement.fits:
            # Held before the first await: no other gang is checked until then (one event
            # loop), so two never count the same free GPUs.
            for pod in gated:
                capacity.hold((pod.namespace, pod.name), pod.demand)
            try:
                await asyncio.gather(
                    *(cluster_writes.lift_gate(self.ctx.kube, pod) for pod in gated)
                )
            except Exception:
                for pod in gated:
                    capacity.drop((pod.namespace, pod.name))
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
        await self.view.report(
            run, Phase.Scheduling, reasons.REASON_UNSCHEDULABLE, placement.message
        )
        return POLL_CLUSTER  # freed capacity wakes gated runs (handlers.pod_changed)

    async def _check_preempt_request(
        self, run: RunPublic, number: int, mine: Sequence[PodFacts]
    ) -> None:
        """`crucible runs preempt` on a Kubernetes run: delete its pods as a drain would
        (SIGTERM, the grace period to checkpoint)."""
        if await self.view.preempt_requested(run, number):
            self.tracked.stopping = outcome.Outcome(
                outcome.State.interrupted,
                reasons.REASON_PREEMPTED,
                None,
                f"attempt {number} preempted on request",
            )
            await self._stop(mine)
            self._emit("Normal", reasons.EVENT_PREEMPT_REQUESTED, f"draining attempt {number}")
        self.view.preempt_taken(run)

    async def _end_attempt(
        self, run: RunPublic, number: int, verdict: outcome.Outcome, mine: Sequence[PodFacts]
    ) -> float:
        if verdict.state is not outcome.State.succeeded:
            self.tracked.stopping = verdict
            await self._stop(mine)
            if not self._quiet(mine):
                return POLL_WAITING  # the workload is still checkpointing; wait for it
        await self.view.end_attempt(run, number, _attempt_end(verdict))
        if verdict.state is outcome.State.succeeded:
            await self.view.report(run, Phase.Succeeded, reasons.REASON_COMPLETED, "")
            self._emit("Normal", reasons.REASON_COMPLETED, f"attempt {number} succeeded")
            if self.kind == "EvalJob":
                self.results = await self.view.eval_scores(run)
        else:
            await self.view.report(run, Phase.Interrupted, verdict.reason, verdict.message)
            self._emit("Warning", verdict.reason, verdict.message)
        self.tracked.open_attempt = None
        self.tracked.stopping = None
        self.tracked.started = False
        self.ctx.metrics.attempt_ends.labels(self.kind, verdict.reason).inc()
        latest = self.view.latest
        if latest is not None and latest.phase is Phase.Scheduling:
            return 0.0  # the report's answer is recovery's: the next attempt is due now
        return POLL_SOON

    async def _stop_after_end(self, run: RunPublic) -> None:
        """A terminal run (cancelled, or failed by recovery or the watchdog) keeps no pods."""
        mine = self._attempt_pods()
        live = [p for p in self.pods if not p.terminal]
        await self._stop(live)
        number = self.tracked.open_attempt
        if number is None:
            return
        if live and not self._quiet(mine):
            return
        reason = (
            reasons.REASON_CANCELLED_BY_USER if run.phase is Phase.Cancelled else run.reason
        ) or run.phase.value
        verdict = outcome.Outcome(outcome.State.failed, reason, None, run.message)
        await self.view.end_attempt(run, number, _attempt_end(verdict))
        self.tracked.open_attempt = None

    # -- pods --------------------------------------------------------------------------------

    def _attempt_pods(self) -> list[PodFacts]:
        number = self.tracked.open_attempt
        return [p for p in self.pods if number is not None and p.attempt == number]

    def _quiet(self, mine: Sequence[PodFacts]) -> bool:
        """Every pod stopped: terminal, gone, or on a lost node (which will never say)."""
        return all(
            p.terminal or p.gated or not cluster_writes.node_ok(self.nodes, p.node) for p in mine
        )

    async def _stop(self, victims: Sequence[PodFacts]) -> None:
        await cluster_writes.stop(self.ctx.kube, victims, self.nodes)

    async def _create_pods(
        self, run: RunPublic, number: int, resume: int | None, inputs: Mapping[str, Any] | None
    ) -> None:
        attempt = pods.Attempt(run.id, number, resume, inputs)
        built = pods.build_pods(self.body, self.kind, attempt, self.ctx.options)
        if len(built) > 1:
            service = pods.build_service(self.body, self.kind)
            kopf.adopt(service, owner=self.owner)
            await cluster_writes.create(self.ctx.kube, service)
        existing = {p.name for p in self.pods}
        missing = [pod for pod in built if pod["metadata"]["name"] not in existing]
        placed = self._place_now(built) if len(missing) == len(built) else []
        try:
            for pod in missing:
                kopf.adopt(pod, owner=self.owner)
                if await cluster_writes.create(self.ctx.kube, pod):
                    self.ctx.metrics.pods_created.labels(self.kind).inc()
        except Exception:
            for key in placed:
                self.ctx.capacity.drop(key)
            raise

    def _place_now(self, built: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """A new gang that fits already is created without its gate (held as placed),
        saving the gated pods' round trip: create, wait for the index, lift each gate.
        Returns the held pods' keys; none when it does not fit (created gated, then)."""
        if not all(pod["spec"].get("schedulingGates") for pod in built):
            return []  # admitted by Kueue, not by our gate
        capacity = self.ctx.capacity
        placement = capacity.fit(gang.Gang.of(len(built), built[0]["spec"]))
        if not placement.fits:
            return []
        keys = []
        for pod in built:
            del pod["spec"]["schedulingGates"]
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            capacity.hold(key, demand_of(pod["spec"]))
            keys.append(key)
        self.tracked.scheduled = Condition(
            reasons.CONDITION_SCHEDULED, None, "GangReleased", placement.message
        )
        return keys

    # -- status ------------------------------------------------------------------------------

    async def _write_status(self, run: RunPublic) -> None:
        old = self.body.get("status") or {}
        if run.kind == "train":
            newest = await self.view.newest_checkpoint(run)
            shown = old.get("latestCheckpoint") or {}
            if newest is not None and newest.step > shown.get("step", -1):
                self.latest_checkpoint = {"id": newest.id, "step": newest.step, "uri": newest.uri}
        if self.kind == "EvalJob" and run.phase is Phase.Succeeded and "results" not in old:
            self.results = self.results or await self.view.eval_scores(run)
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
            await cluster_writes.patch_status(self.ctx.kube, self.kind, self.meta, status)
        self.view.checkpoint_shown(run)
        if run.phase.value != self.tracked.last_phase:
            self.ctx.metrics.phases[self.meta["uid"]] = (self.kind, run.phase.value)
            self.tracked.last_phase = run.phase.value
        self._flush_events()

    def _emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def _flush_events(self) -> None:
        """Events go out after the status they describe was written."""
        for type_, reason, message in self.events:
            kopf.event(self.owner, type=type_, reason=reason, message=message[:1024])
        self.events.clear()


def _attempt_end(verdict: outcome.Outcome) -> AttemptEnd:
    return AttemptEnd(
        end_reason=verdict.reason or reasons.REASON_ERROR_EXIT,
        exit_code=verdict.exit_code,
        message=verdict.message[:4000],
    )


def _refused_status(message: str) -> dict[str, Any]:
    return {
        "phase": Phase.Failed.value,
        "conditions": [
            {
                "type": reasons.CONDITION_READY,
                "status": "False",
                "reason": reasons.REASON_INVALID_SPEC,
                "message": message[:32768],
                "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ],
    }
