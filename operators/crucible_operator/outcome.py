"""Where an attempt stands, judged from its pods and their nodes (facts, never guesses).

Interruptions (the cluster took the pods away) and application failures (the workload
failed) are told apart here, because recovery counts them against separate budgets:
- a DisruptionTarget condition says who disrupted the pod (scheduler preemption, the
  Eviction API, the taint manager or pod GC after a node died, the kubelet under pressure);
- a pod on a node that is gone or not Ready lost its node;
- a pod deleted by someone else was evicted;
- OOMKilled and non-zero exits with none of the above are the workload's own failures.
When both kinds of evidence exist (a node died and its peers then crashed on a broken
rendezvous), the interruption is the cause.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from crucible.domain import reasons
from crucible_operator.facts import NodeFacts, PodFacts

# DisruptionTarget reasons (k8s.io/api/core/v1 constants) -> interruption reason.
_DISRUPTIONS = {
    "PreemptionByScheduler": reasons.REASON_PREEMPTED,
    "PreemptionByKubeScheduler": reasons.REASON_PREEMPTED,
    "EvictionByEvictionAPI": reasons.REASON_EVICTED,
    "TerminationByKubelet": reasons.REASON_EVICTED,
    "DeletionByTaintManager": reasons.REASON_NODE_LOST,
    "DeletionByPodGC": reasons.REASON_NODE_LOST,
}


class State(StrEnum):
    gated = "gated"  # waiting for the whole gang to fit
    scheduling = "scheduling"  # released, not all bound yet
    starting = "starting"  # all bound, not all running
    running = "running"
    succeeded = "succeeded"
    interrupted = "interrupted"
    failed = "failed"

    @property
    def ended(self) -> bool:
        return self in (State.succeeded, State.interrupted, State.failed)


@dataclass(frozen=True)
class Outcome:
    state: State
    reason: str = ""
    exit_code: int | None = None
    message: str = ""


def _interruption(pod: PodFacts, nodes: Mapping[str, NodeFacts]) -> Outcome | None:
    status, why, message = pod.conditions.get("DisruptionTarget", ("", "", ""))
    if status == "True":
        reason = _DISRUPTIONS.get(why, reasons.REASON_EVICTED)
        return Outcome(State.interrupted, reason, _exit(pod), f"pod {pod.name}: {why}: {message}")
    if pod.status_reason == "Evicted":
        return Outcome(
            State.interrupted,
            reasons.REASON_EVICTED,
            _exit(pod),
            f"pod {pod.name} evicted: {pod.status_message}",
        )
    if pod.node is not None and not pod.terminal:
        node = nodes.get(pod.node)
        if node is None or not node.ready:
            state = "is gone" if node is None else "is not Ready"
            return Outcome(
                State.interrupted,
                reasons.REASON_NODE_LOST,
                None,
                f"node {pod.node} of pod {pod.name} {state}",
            )
    if pod.deleting:
        return Outcome(
            State.interrupted,
            reasons.REASON_EVICTED,
            _exit(pod),
            f"pod {pod.name} was deleted while the attempt ran",
        )
    return None


def _finished(pod: PodFacts) -> str:
    """When the pod's first failing container ended (an init container that completed is no
    failure); after every time when the status gives none."""
    ended = [t.finished_at for t in pod.terminations if t.finished_at and t.exit_code != 0]
    return min(ended) if ended else "~"  # "~" sorts after any RFC 3339 time


def _exit(pod: PodFacts) -> int | None:
    codes = [t.exit_code for t in pod.terminations]
    return next((c for c in codes if c != 0), codes[0] if codes else None)


# Waiting reasons of a container whose image the node could not get. The kubelet would
# retry a pull for ever; the attempt fails instead (counted against recovery.maxFailures,
# whose backoff retries a registry's hiccup), so a wrong image settles the run.
_IMAGE_PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)


def _failure(pod: PodFacts) -> Outcome | None:
    for why, message in pod.waiting:
        if why in _IMAGE_PULL_FAILURES and not pod.terminal:
            return Outcome(
                State.failed,
                reasons.REASON_IMAGE_PULL_FAILED,
                None,
                f"pod {pod.name} cannot start: {why}: {message}",
            )
    if pod.phase != "Failed":
        return None
    code = _exit(pod)
    if any(t.reason == "OOMKilled" for t in pod.terminations):
        return Outcome(
            State.failed,
            reasons.REASON_OOM_KILLED,
            code,
            f"pod {pod.name} was OOMKilled; raise spec.resources.memory",
        )
    said = next((t.message for t in pod.terminations if t.exit_code != 0 and t.message), "")
    return Outcome(
        State.failed,
        reasons.REASON_ERROR_EXIT,
        code,
        f"pod {pod.name} failed with exit code {code}"
        + (f": {said}" if said else "")
        + f"; see `kubectl logs {pod.name}`",
    )


def judge(
    pods: Sequence[PodFacts], expected: int, nodes: Mapping[str, NodeFacts], *, started: bool
) -> Outcome:
    """`pods`: the attempt's pods that exist; `expected`: how many it has; `started`: the
    attempt was seen running, so a missing pod was lost rather than not yet created."""
    by_rank = sorted(pods, key=lambda p: p.rank)
    interruptions = [o for p in by_rank if (o := _interruption(p, nodes)) is not None]
    if interruptions:
        return interruptions[0]
    # The pod that failed first is the cause: once one rank dies, its peers fail too, on
    # the broken collective (a gloo "Connection closed by peer"), and say nothing of why.
    failed = sorted(
        ((o, p) for p in by_rank if (o := _failure(p)) is not None),
        key=lambda found: (_finished(found[1]), found[1].rank),
    )
    failures = [o for o, _ in failed]
    oom = [o for o in failures if o.reason == reasons.REASON_OOM_KILLED]
    if oom or failures:
        return (oom or failures)[0]
    if started and len(pods) < expected:
        present = {p.rank for p in pods}
        missing = [r for r in range(expected) if r not in present]
        return Outcome(
            State.interrupted,
            reasons.REASON_EVICTED,
            None,
            f"pod(s) of rank {missing} disappeared while the attempt ran",
        )
    if len(pods) == expected and all(p.phase == "Succeeded" for p in pods):
        return Outcome(State.succeeded, reasons.REASON_COMPLETED, 0, "")
    if any(p.gated for p in pods):
        return Outcome(State.gated)
    unbound = [p for p in by_rank if p.node is None]
    if unbound:
        _, why, message = unbound[0].conditions.get("PodScheduled", ("", "", ""))
        return Outcome(State.scheduling, why, None, message)
    if len(pods) == expected and all(p.phase in ("Running", "Succeeded") for p in pods):
        return Outcome(State.running)
    return Outcome(State.starting)
