"""The operator's pure decisions: how an attempt ended (outcome.judge), whether a gang fits
(gang.fit), what the pods look like (pods.build_pods) and how conditions move
(status.merge_conditions). The cluster-facing behaviour is tested in tests/k8s."""

import dataclasses
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from crucible.domain import reasons
from crucible_operator import cluster_report, crds, gang, naming, outcome, pods, status
from crucible_operator.facts import (
    Demand,
    NodeFacts,
    PodFacts,
    PodUse,
    Taint,
    Termination,
    pod_facts,
    quantity,
)

GPU_TAINT = Taint("nvidia.com/gpu", "", "NoSchedule")


def pod(rank: int = 0, **kw: Any) -> PodFacts:
    values: dict[str, Any] = {
        "name": f"r-a1-{rank}",
        "namespace": "ns",
        "run_uid": "u",
        "attempt": 1,
        "rank": rank,
        "phase": "Running",
        "node": "n0",
        "gated": False,
        "deleting": False,
        "demand": Demand(gpus=8),
    }
    values.update(kw)
    return PodFacts(**values)


def node(name: str = "n0", gpus: int = 8, **kw: Any) -> NodeFacts:
    values: dict[str, Any] = {
        "name": name,
        "ready": True,
        "unschedulable": False,
        "labels": {},
        "taints": (GPU_TAINT,),
        "allocatable": Demand(gpus=gpus, cpu=64, memory=quantity("512Gi")),
    }
    values.update(kw)
    return NodeFacts(**values)


NODES = {"n0": node("n0"), "n1": node("n1")}


@pytest.mark.parametrize(
    ("pods_", "started", "state", "reason"),
    [
        ([pod(0), pod(1, node="n1")], True, outcome.State.running, ""),
        ([pod(0, phase="Pending")], False, outcome.State.starting, ""),
        ([pod(0, gated=True, node=None)], False, outcome.State.gated, ""),
        (
            [pod(0, node=None, conditions={"PodScheduled": ("False", "Unschedulable", "0/4")})],
            False,
            outcome.State.scheduling,
            "Unschedulable",
        ),
        (
            [pod(0, phase="Succeeded"), pod(1, phase="Succeeded", node="n1")],
            True,
            outcome.State.succeeded,
            reasons.REASON_COMPLETED,
        ),
        (
            [pod(0, conditions={"DisruptionTarget": ("True", "PreemptionByScheduler", "")})],
            True,
            outcome.State.interrupted,
            reasons.REASON_PREEMPTED,
        ),
        (
            [pod(0, conditions={"DisruptionTarget": ("True", "EvictionByEvictionAPI", "")})],
            True,
            outcome.State.interrupted,
            reasons.REASON_EVICTED,
        ),
        (
            [pod(0, conditions={"DisruptionTarget": ("True", "DeletionByTaintManager", "")})],
            True,
            outcome.State.interrupted,
            reasons.REASON_NODE_LOST,
        ),
        ([pod(0, node="gone")], True, outcome.State.interrupted, reasons.REASON_NODE_LOST),
        (
            [pod(0, status_reason="Evicted")],
            True,
            outcome.State.interrupted,
            reasons.REASON_EVICTED,
        ),
        ([pod(0, deleting=True)], True, outcome.State.interrupted, reasons.REASON_EVICTED),
        (
            [pod(0, phase="Failed", terminations=(Termination(137, "OOMKilled"),))],
            True,
            outcome.State.failed,
            reasons.REASON_OOM_KILLED,
        ),
        (
            [pod(0, phase="Failed", terminations=(Termination(1, "Error"),))],
            True,
            outcome.State.failed,
            reasons.REASON_ERROR_EXIT,
        ),
        ([pod(0)], True, outcome.State.interrupted, reasons.REASON_EVICTED),  # rank 1 vanished
    ],
    ids=[
        "running",
        "starting",
        "gated",
        "scheduler-says-why",
        "succeeded",
        "preempted",
        "evicted",
        "taint-manager",
        "node-gone",
        "kubelet-evicted",
        "deleted-by-someone",
        "oom",
        "error-exit",
        "pod-vanished",
    ],
)
def test_judge(pods_: list[PodFacts], started: bool, state: outcome.State, reason: str) -> None:
    expected = 2 if len(pods_) == 2 or state is outcome.State.interrupted else 1
    verdict = outcome.judge(pods_, expected, NODES, started=started)
    assert (verdict.state, verdict.reason) == (state, reason)


def test_an_interruption_outranks_the_crashes_it_caused() -> None:
    """A node dies; its peer then fails on the broken rendezvous. The cause is the node."""
    crashed = pod(0, phase="Failed", terminations=(Termination(1, "Error"),))
    verdict = outcome.judge([crashed, pod(1, node="dead")], 2, NODES, started=True)
    assert verdict.reason == reasons.REASON_NODE_LOST
    assert "dead" in verdict.message


def test_the_pod_that_failed_first_is_the_cause_whatever_its_rank() -> None:
    """Rank 1 dies; rank 0 then fails on the collective it was in. The attempt's message is
    rank 1's, with its own words, not the peer's gloo error."""
    cause = Termination(1, "Error", "ValueError: bad batch", "2026-12-02T20:39:10Z")
    echo = Termination(
        1, "Error", "RuntimeError: Connection closed by peer", "2026-12-02T20:39:15Z"
    )
    fetched = Termination(0, "Completed", "", "2026-12-02T20:30:00Z")  # an init container
    peer = pod(0, phase="Failed", terminations=(fetched, echo))
    first = pod(1, phase="Failed", terminations=(cause,))
    verdict = outcome.judge([peer, first], 2, NODES, started=True)
    assert verdict.message.startswith(f"pod {first.name} failed with exit code 1: ValueError")
    # Without times, the lower rank is named, as before.
    untimed = [pod(r, phase="Failed", terminations=(Termination(1, "Error"),)) for r in (1, 0)]
    assert outcome.judge(untimed, 2, NODES, started=True).message.startswith(
        f"pod {untimed[1].name} "
    )


def test_the_exit_code_comes_from_the_failing_container() -> None:
    failed = pod(0, phase="Failed", terminations=(Termination(0, "Completed"), Termination(3, "E")))
    assert outcome.judge([failed], 1, NODES, started=True).exit_code == 3


def test_the_failure_says_what_the_workload_left_in_its_termination_log() -> None:
    said = Termination(1, "Error", "checkpoint at step 200 could not be written: full")
    failed = pod(0, phase="Failed", terminations=(said,))
    message = outcome.judge([failed], 1, NODES, started=True).message
    assert "exit code 1: checkpoint at step 200 could not be written: full" in message


TOLERATE_GPU = [gang.Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")]


def gang_of(size: int, gpus: int, **kw: Any) -> gang.Gang:
    values: dict[str, Any] = {
        "size": size,
        "demand": Demand(gpus=gpus),
        "node_selector": {},
        "tolerations": TOLERATE_GPU,
    }
    values.update(kw)
    return gang.Gang(**values)


def test_an_image_the_node_cannot_pull_fails_the_attempt_with_the_kubelets_words() -> None:
    waiting = pod(
        1,
        phase="Pending",
        waiting=(("ErrImagePull", 'failed to pull "reg/x:1": not found'),),
    )
    verdict = outcome.judge([pod(0), waiting], 2, {"n0": node()}, started=False)
    assert (verdict.state, verdict.reason) == (outcome.State.failed, "ImagePullFailed")
    assert "r-a1-1" in verdict.message and "reg/x:1" in verdict.message
    # A container still creating is only starting.
    creating = pod(phase="Pending", waiting=(("ContainerCreating", ""),))
    assert outcome.judge([creating], 1, {"n0": node()}, started=False).state is (
        outcome.State.starting
    )


def test_pod_facts_read_waiting_containers() -> None:
    facts = pod_facts(
        {
            "metadata": {"name": "p"},
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}
                ],
            },
        }
    )
    assert facts.waiting == (("ImagePullBackOff", "Back-off"),)


def test_a_gang_fits_only_when_every_pod_does() -> None:
    nodes = [node("a"), node("b")]
    assert gang.fit(gang_of(2, 8), nodes, {}, []).fits
    placement = gang.fit(gang_of(3, 8), nodes, {}, [])
    assert not placement.fits
    assert "only 2 fit" in placement.message


def test_bound_pods_and_released_gangs_take_their_gpus() -> None:
    nodes = [node("a"), node("b")]
    assert not gang.fit(gang_of(2, 8), nodes, {"a": Demand(gpus=4)}, []).fits
    assert not gang.fit(gang_of(2, 8), nodes, {}, [Demand(gpus=8)]).fits
    assert gang.fit(gang_of(2, 4), nodes, {"a": Demand(gpus=4)}, [Demand(gpus=4)]).fits


def test_placement_respects_taints_selectors_and_readiness() -> None:
    tainted_only = [node("a")]
    assert not gang.fit(gang_of(1, 1, tolerations=[]), tainted_only, {}, []).fits
    labelled = [node("a", labels={"pool": "h200"}), node("b")]
    assert gang.fit(gang_of(1, 8, node_selector={"pool": "h200"}), labelled, {}, []).fits
    assert not gang.fit(gang_of(2, 8, node_selector={"pool": "h200"}), labelled, {}, []).fits
    assert not gang.fit(gang_of(1, 8), [node("a", ready=False)], {}, []).fits
    assert not gang.fit(gang_of(1, 8), [node("a", unschedulable=True)], {}, []).fits


def test_small_pods_pack_tightly_to_leave_room_for_big_ones() -> None:
    nodes = [node("a"), node("b", gpus=4)]
    # Two 2-GPU pods go to the 4-GPU node, leaving all of "a" for a later 8-GPU pod.
    assert gang.fit(gang_of(2, 2), nodes, {}, []).fits
    assert gang.fit(gang_of(1, 8), nodes, {}, [Demand(gpus=2), Demand(gpus=2)]).fits


def _fit_by_sorting(want: gang.Gang, nodes: list[NodeFacts], bound, reserved) -> tuple[bool, int]:
    """The placement rule written plainly, as the specification `gang.fit` must match:
    every pod (reserved ones first, then the gang's) goes to the first node that takes it
    among those with enough GPUs, sorted by (free GPUs, free CPU, name)."""
    free = {}
    for n in nodes:
        if gang.eligible(n, want):
            used = bound.get(n.name, Demand())
            free[n.name] = [
                n.allocatable.gpus - used.gpus,
                n.allocatable.cpu - used.cpu,
                n.allocatable.memory - used.memory,
            ]

    def place(demand: Demand) -> bool:
        order = sorted((f[0], f[1], name) for name, f in free.items() if f[0] >= demand.gpus)
        for _, _, name in order:
            f = free[name]
            if f[1] >= demand.cpu and f[2] >= demand.memory:
                f[0] -= demand.gpus
                f[1] -= demand.cpu
                f[2] -= demand.memory
                return True
        return False

    for demand in reserved:
        place(demand)
    placed = 0
    while placed < want.size and place(want.demand):
        placed += 1
    return placed == want.size, placed


@pytest.mark.parametrize("seed", range(40))
def test_placement_matches_the_plain_rule_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [
        node(f"n{i:03d}", gpus=rng.choice([4, 8]), ready=rng.random() > 0.05)
        for i in range(rng.randint(1, 60))
    ]
    bound = {
        n.name: Demand(gpus=rng.randint(0, n.allocatable.gpus), cpu=rng.choice([0, 8, 60]))
        for n in nodes
        if rng.random() < 0.5
    }
    reserved = [Demand(gpus=rng.choice([1, 2, 4, 8]), cpu=rng.choice([0, 4])) for _ in range(30)]
    want = gang.Gang(
        rng.randint(1, 8), Demand(gpus=rng.choice([1, 2, 4, 8]), cpu=2), {}, TOLERATE_GPU
    )
    fits, placed = _fit_by_sorting(want, nodes, bound, reserved)
    placement = gang.fit(want, nodes, bound, reserved)
    assert placement.fits == fits
    # The capacity the events build places the released pods first, then the held ones.
    pending = reserved[1::2] + reserved[0::2]
    expected = gang.fit(want, nodes, bound, pending)
    assert capacity_of(nodes, bound, reserved, rng, want).fit(want) == expected
    assert placement.fits or f"only {placed} fit now" in placement.message


def use(node_name: str | None, demand: Demand, released: bool = False) -> PodUse:
    return PodUse(node_name, demand, released=released, gated=False)


def capacity_of(
    nodes: list[NodeFacts],
    bound: dict[str, Demand],
    reserved: list[Demand],
    rng: random.Random,
    want: gang.Gang,
) -> gang.Capacity:
    """The same cluster as the events would build it, nodes and bound pods in a random
    order, with pods that come and go on the way (each bound total split over two pods, one
    bound at first elsewhere); then the reserved pods, odd ones released, even ones held.
    Gangs are checked on the way, so that later events update what those checks built."""
    capacity = gang.Capacity()
    steps: list[Any] = [("node", n) for n in nodes]
    for name, used in bound.items():
        half = Demand(used.gpus // 2, used.cpu / 2, used.memory / 2)
        rest = Demand(used.gpus - half.gpus, used.cpu - half.cpu, used.memory - half.memory)
        steps += [("pod", ("ns", f"{name}-a"), use(name, half))]
        steps += [("moved", ("ns", f"{name}-b"), use(nodes[0].name, rest), use(name, rest))]
    steps.append(("pod", ("ns", "gone"), use(nodes[-1].name, Demand(gpus=8))))
    steps += [("check",)] * 4
    rng.shuffle(steps)
    steps.append(("gone", ("ns", "gone")))
    for i, demand in enumerate(reserved):
        steps.append(("released" if i % 2 else "held", ("ns", f"r{i}"), demand))
    for step in steps:
        if step[0] == "node":
            capacity.node_seen(step[1])
        elif step[0] == "pod":
            capacity.pod_seen(step[1], step[2])
        elif step[0] == "moved":  # pending elsewhere first, then bound where it counts
            capacity.pod_seen(step[1], step[2])
            capacity.pod_seen(step[1], step[3])
        elif step[0] == "released":
            capacity.pod_seen(step[1], use(None, step[2], released=True))
        elif step[0] == "held":
            capacity.hold(step[1], step[2])
        elif step[0] == "check":
            capacity.fit(want)
        else:
            capacity.pod_gone(step[1])
    return capacity


def test_capacity_follows_each_nodes_latest_facts() -> None:
    capacity = gang.Capacity()
    want = gang_of(1, 8)
    for facts in (node("a"), node("b")):
        assert capacity.node_seen(facts)  # new: its pods' runs are woken
    assert capacity.fit(want).fits
    # Replaced by a node event: checked again, not recalled.
    assert capacity.node_seen(node("a", ready=False))  # readiness changed
    assert not capacity.node_seen(node("b", unschedulable=True))  # readiness did not
    assert not capacity.fit(want).fits
    capacity.node_seen(node("a"))
    assert capacity.fit(want).fits
    # Another gang shape has its own answers (a's taint is not tolerated).
    assert not capacity.fit(gang_of(1, 8, tolerations=[])).fits
    capacity.node_gone("a")
    assert not capacity.fit(want).fits


def test_a_held_pod_counts_until_its_event_shows_it_ungated() -> None:
    clock = Clock()
    capacity = gang.Capacity(clock=clock)
    capacity.node_seen(node("a"))
    capacity.hold(("ns", "g-0"), Demand(gpus=8))
    assert not capacity.fit(gang_of(1, 8)).fits
    # Still gated in its event (the gate's removal not seen yet): still held.
    capacity.pod_seen(("ns", "g-0"), PodUse(None, Demand(gpus=8), released=False, gated=True))
    assert ("ns", "g-0") in capacity.reservations
    # Shown ungated: it counts from its events (released, then bound), not twice.
    capacity.pod_seen(("ns", "g-0"), use(None, Demand(gpus=8), released=True))
    assert ("ns", "g-0") not in capacity.reservations
    assert not capacity.fit(gang_of(1, 8)).fits
    capacity.pod_seen(("ns", "g-0"), use("a", Demand(gpus=8)))
    assert not capacity.fit(gang_of(1, 1)).fits
    capacity.pod_gone(("ns", "g-0"))
    assert capacity.fit(gang_of(1, 8)).fits


def test_a_hold_whose_pod_never_shows_up_expires() -> None:
    clock = Clock()
    capacity = gang.Capacity(clock=clock)
    capacity.node_seen(node("a"))
    capacity.hold(("ns", "gone-0"), Demand(gpus=2))
    clock.now += gang.EXPIRE_SECONDS - 1
    assert not capacity.fit(gang_of(1, 8)).fits
    clock.now += 2
    assert capacity.fit(gang_of(1, 8)).fits
    assert len(capacity.reservations) == 0


def test_a_failed_create_drops_its_hold() -> None:
    capacity = gang.Capacity(clock=Clock())
    capacity.hold(("ns", "b-0"), Demand(gpus=1))
    capacity.drop(("ns", "b-0"))
    capacity.drop(("ns", "b-0"))  # twice is fine
    assert capacity.reservations.demands() == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def body(kind: str = "TrainingRun", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "sft", "namespace": "team", "uid": "uid-1"},
        "spec": {"experiment": "e", **spec},
    }


OPTIONS = pods.PodOptions(api_url="http://cp:8080", token_secret="tok", default_image="img:1")


def env(built: dict[str, Any]) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in built["spec"]["containers"][0]["env"]
    }


def test_pods_of_a_multi_node_run() -> None:
    built = pods.build_pods(
        body(nodes=2, gpusPerNode=8, image="train:2", resources={"memory": "64Gi"}),
        "TrainingRun",
        pods.Attempt(run_id=7, number=3, resume_from=41, inputs={"datasets": ["d@2"]}),
        OPTIONS,
    )
    assert [p["metadata"]["name"] for p in built] == ["sft-a3-0", "sft-a3-1"]
    first = built[0]
    labels = first["metadata"]["labels"]
    assert labels[naming.LABEL_RUN_UID] == "uid-1"
    assert (labels[naming.LABEL_ATTEMPT], labels[naming.LABEL_RANK]) == ("3", "0")
    container = first["spec"]["containers"][0]
    assert container["image"] == "train:2"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "memory": "64Gi"}
    assert container["command"][:5] == [
        "torchrun",
        "--nnodes=2",
        "--node-rank=0",
        "--nproc-per-node=8",
        "--master-addr=sft-a3-0.sft.team.svc",
    ]
    assert container["command"][-2:] == ["-m", "crucible.jobs.train"]
    # The workload's last words (or its log's end) reach the container status.
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert env(first)["CRUCIBLE_TERMINATION_LOG"] == container["terminationMessagePath"]
    assert first["spec"]["schedulingGates"] == [{"name": naming.GANG_GATE}]
    assert (first["spec"]["hostname"], first["spec"]["subdomain"]) == ("sft-a3-0", "sft")
    values = env(built[1])
    assert values["NODE_RANK"] == "1"
    assert values["CRUCIBLE_RESUME_FROM"] == "41"
    assert values["CRUCIBLE_RUN_ID"] == "7"
    # No shared storage configured: the pod's own scratch, which its user can write.
    assert values["CRUCIBLE_CHECKPOINT_URI"] == "file:///workspace/checkpoints"
    assert "envFrom" not in first["spec"]["containers"][0]
    # The run's own token, not the namespace's (served models') Secret.
    token = {"secretKeyRef": {"name": "crucible-run-7-token", "key": "token"}}
    assert values["CRUCIBLE_TOKEN"] == token
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in first["spec"][
        "tolerations"
    ]
    assert first["spec"]["securityContext"]["runAsNonRoot"] is True
    shm = next(v for v in first["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_a_single_pod_runs_the_command_itself_with_the_default_image() -> None:
    (built,) = pods.build_pods(
        body("EvalJob", checkpoint={"id": 3}, suite="arith", args=["--fast"]),
        "EvalJob",
        pods.Attempt(run_id=1, number=1, resume_from=None, inputs=None),
        OPTIONS,
    )
    container = built["spec"]["containers"][0]
    assert container["image"] == "img:1"
    assert container["command"] == ["python", "-m", "crucible.jobs.eval", "--fast"]
    assert "MASTER_ADDR" not in env(built) and "CRUCIBLE_RESUME_FROM" not in env(built)
    assert "hostname" not in built["spec"]


def test_with_a_storage_claim_checkpoints_and_published_files_go_to_the_shared_volume() -> None:
    options = dataclasses.replace(OPTIONS, storage_claim="shared", storage_path="/data")
    (built,) = pods.build_pods(
        body(),
        "TrainingRun",
        pods.Attempt(run_id=9, number=2, resume_from=None, inputs=None),
        options,
    )
    values = env(built)
    # Under the run's id, not its name: a name used again by a later run is another run.
    assert values["CRUCIBLE_CHECKPOINT_URI"] == "file:///data/runs/9/checkpoints"
    assert values["CRUCIBLE_OUTPUTS_DIR"] == "/data/runs/9/outputs"
    volume = next(v for v in built["spec"]["volumes"] if v["name"] == "storage")
    assert volume["persistentVolumeClaim"] == {"claimName": "shared"}
    mounts = built["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "storage", "mountPath": "/data"} in mounts
    # The spec's own checkpoint storage still wins.
    (own,) = pods.build_pods(
        body(checkpoints={"storage": "s3://b/x"}),
        "TrainingRun",
        pods.Attempt(run_id=9, number=2, resume_from=None, inputs=None),
        options,
    )
    assert env(own)["CRUCIBLE_CHECKPOINT_URI"] == "s3://b/x/runs/9/checkpoints"


def test_an_online_run_with_generator_pods_has_them_after_its_trainer() -> None:
    options = dataclasses.replace(OPTIONS, storage_claim="shared", storage_path="/data")
    online = {"online": {"environment": "calculator", "generator": "pod", "generators": 2}}
    spec = {"gpusPerNode": 1, "config": online}
    assert pods.shape("TrainingRun", spec) == pods.Shape(1, 1, 1, generators=2)
    built = pods.build_pods(body(**spec), "TrainingRun", pods.Attempt(9, 2, None, None), options)
    assert [p["metadata"]["name"] for p in built] == ["sft-a2-0", "sft-a2-1", "sft-a2-2"]
    trainer, first, second = (env(p) for p in built)
    endpoints = "/data/runs/9/outputs/generators/attempt-2"
    assert trainer["CRUCIBLE_GENERATOR_ENDPOINTS"] == endpoints
    assert first["CRUCIBLE_GENERATOR_ENDPOINTS"] == endpoints
    assert (first["CRUCIBLE_GENERATOR_INDEX"], second["CRUCIBLE_GENERATOR_INDEX"]) == ("0", "1")
    assert first["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "CRUCIBLE_GENERATOR_INDEX" not in trainer and "MASTER_ADDR" not in trainer
    containers = [p["spec"]["containers"][0] for p in built]
    assert containers[0]["command"] == ["python", "-m", "crucible.jobs.online_rl"]
    assert containers[1]["command"] == [
        "python",
        "-m",
        "crucible.online_rl.generator_process",
        "--pod",
    ]
    # Each generator has the trainer's GPUs, so one gang check places them all.
    assert all(c["resources"] == containers[0]["resources"] for c in containers)
    assert all(p["spec"]["schedulingGates"] == [{"name": naming.GANG_GATE}] for p in built)


@pytest.mark.parametrize(
    "online",
    [{}, {"generator": "process", "generators": 2}, {"generator": "thread"}],
)
def test_only_generator_pod_adds_pods(online: dict[str, Any]) -> None:
    assert pods.shape("TrainingRun", {"config": {"online": online}}).all_pods == 1


def test_with_object_storage_files_go_under_runs_and_keys_come_from_a_secret() -> None:
    options = dataclasses.replace(OPTIONS, storage_uri="s3://team/crucible/", storage_secret="s3")
    (built,) = pods.build_pods(
        body(),
        "TrainingRun",
        pods.Attempt(run_id=9, number=2, resume_from=None, inputs=None),
        options,
    )
    values = env(built)
    assert values["CRUCIBLE_CHECKPOINT_URI"] == "s3://team/crucible/runs/9/checkpoints"
    assert values["CRUCIBLE_OUTPUTS_URI"] == "s3://team/crucible/runs/9/outputs"
    container = built["spec"]["containers"][0]
    # The credentials reach the process from the Secret; the pod's spec names only the Secret.
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert not any(name.startswith("AWS_") for name in values)
    assert all(v["name"] != "storage" for v in built["spec"]["volumes"])


def test_a_code_package_is_unpacked_by_an_init_container_first_on_pythonpath() -> None:
    options = dataclasses.replace(OPTIONS, storage_uri="s3://team/crucible", storage_secret="s3")
    spec: dict[str, Any] = {
        "codePackage": "artifact:team-code",
        "command": ["python", "-m", "team_loop.train"],
        "env": [{"name": "PYTHONPATH", "value": "/opt/extra"}],
    }
    (built,) = pods.build_pods(
        body(**spec),
        "TrainingRun",
        pods.Attempt(run_id=9, number=1, resume_from=None, inputs={"artifacts": {"team-code": 12}}),
        options,
    )
    pod_spec = built["spec"]
    (init,) = pod_spec["initContainers"]
    (workload,) = pod_spec["containers"]
    assert init["name"] == naming.CODE_CONTAINER
    assert init["image"] == workload["image"] == "img:1"
    assert init["command"] == ["python", "-m", "crucible.fetch_code", "--into", pods.CODE_DIR]
    code = {"name": "code", "emptyDir": {}}
    assert code in pod_spec["volumes"]
    assert {"name": "code", "mountPath": pods.CODE_DIR} in init["volumeMounts"]
    assert {"name": "code", "mountPath": pods.CODE_DIR, "readOnly": True} in workload[
        "volumeMounts"
    ]
    # The init container reaches the API and the store as the workload does.
    init_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in init["env"]}
    assert init_env["CRUCIBLE_CODE_PACKAGE"] == "12"  # the id the control plane pinned
    token = {"secretKeyRef": {"name": "crucible-run-9-token", "key": "token"}}
    assert init_env["CRUCIBLE_TOKEN"] == token
    assert init["envFrom"] == workload["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert "PYTHONPATH" not in init_env  # its imports never come from the package
    assert env(built)["PYTHONPATH"] == f"{pods.CODE_DIR}:/opt/extra"
    # Restricted Pod Security: non-root pod, no escalation, no capabilities, in both.
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in (init, workload):
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"

    # With the tool sandbox's profile (docs/agents.md, "Tools in pods") in its place.
    sandboxed = dataclasses.replace(OPTIONS, workload_seccomp_profile="crucible/tool-sandbox.json")
    (tools,) = pods.build_pods(
        body(), "TrainingRun", pods.Attempt(run_id=9, number=1, resume_from=None, inputs=None),
        sandboxed,
    )  # fmt: skip
    assert tools["spec"]["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "crucible/tool-sandbox.json",
    }

    (plain,) = pods.build_pods(
        body(),
        "TrainingRun",
        pods.Attempt(run_id=9, number=1, resume_from=None, inputs=None),
        OPTIONS,
    )
    assert "initContainers" not in plain["spec"]
    assert all(v["name"] != "code" for v in plain["spec"]["volumes"])
    assert "PYTHONPATH" not in env(plain) and "CRUCIBLE_CODE_PACKAGE" not in env(plain)


def test_a_failed_code_fetch_fails_the_attempt_with_its_words() -> None:
    said = "code package artifact 12 (team) does not match: expected sha256:aa, found sha256:bb"
    facts = pod_facts(
        {
            "metadata": {"name": "sft-a1-0"},
            "status": {
                "phase": "Failed",
                "initContainerStatuses": [
                    {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": said}}}
                ],
                "containerStatuses": [
                    {"state": {"waiting": {"reason": "PodInitializing"}}, "name": "workload"}
                ],
            },
        }
    )
    verdict = outcome.judge([facts], 1, NODES, started=False)
    assert (verdict.state, verdict.reason, verdict.exit_code) == (
        outcome.State.failed,
        reasons.REASON_ERROR_EXIT,
        1,
    )
    assert said in verdict.message
    # An init container whose image the node cannot pull fails it too, instead of waiting.
    pulling = pod_facts(
        {
            "metadata": {"name": "sft-a1-0"},
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"state": {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}}
                ],
            },
        }
    )
    assert outcome.judge([pulling], 1, NODES, started=False).reason == "ImagePullFailed"
    # One that finished is no evidence of how the workload ended.
    done = pod_facts(
        {
            "metadata": {"name": "sft-a1-0"},
            "status": {
                "phase": "Succeeded",
                "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
            },
        }
    )
    assert [t.exit_code for t in done.terminations] == [0]


def test_the_operators_node_selector_and_tolerations_apply_to_every_pod() -> None:
    options = dataclasses.replace(
        OPTIONS, node_selector={"pool": "gpu", "zone": "a"}, tolerated_taints=("pool",)
    )
    (built,) = pods.build_pods(
        body(scheduling={"nodeSelector": {"zone": "b"}}),
        "TrainingRun",
        pods.Attempt(run_id=1, number=1, resume_from=None, inputs=None),
        options,
    )
    assert built["spec"]["nodeSelector"] == {"pool": "gpu", "zone": "b"}  # the spec's wins
    assert {"key": "pool", "operator": "Exists"} in built["spec"]["tolerations"]


def test_kueue_queues_admit_the_pods_instead_of_the_gang_gate() -> None:
    (built,) = pods.build_pods(
        body(scheduling={"queueLabels": {"kueue.x-k8s.io/queue-name": "team-a"}}),
        "TrainingRun",
        pods.Attempt(run_id=1, number=1, resume_from=None, inputs=None),
        OPTIONS,
    )
    assert "schedulingGates" not in built["spec"]
    assert built["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert built["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "sft-a1"
    assert built["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "1"


def test_conditions_move_their_transition_time_only_when_their_status_changes() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    first = status.merge_conditions(
        [], [status.Condition("Ready", False, "Scheduling", "waiting")], 1, t0
    )
    later = t0 + timedelta(minutes=5)
    same = status.merge_conditions(
        first, [status.Condition("Ready", False, "Scheduling", "still waiting")], 2, later
    )
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same[0]["message"] == "still waiting" and same[0]["observedGeneration"] == 2
    moved = status.merge_conditions(same, [status.Condition("Ready", True, "Running")], 2, later)
    assert moved[0]["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert moved[0]["status"] == "True"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("node-lost", "NodeLost"),  # attempt reasons, as recovery sets them on the run
        ("failure-retry", "FailureRetry"),
        ("preemption", "Preemption"),
        ("NodeLost", "NodeLost"),
        ("ExitCode:137", "ExitCode:137"),
        ("", "Unknown"),
        ("--", "Unknown"),
        ("7-up", "Unknown"),
    ],
)
def test_condition_reasons_are_what_the_crd_accepts(reason: str, expected: str) -> None:
    pattern = crds._condition_schema()["properties"]["reason"]["pattern"]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    (written,) = status.merge_conditions([], [status.Condition("Ready", False, reason)], 1, t0)
    assert written["reason"] == expected
    assert re.fullmatch(pattern, written["reason"])


def test_quantities() -> None:
    assert quantity("500m") == 0.5
    assert quantity("64Gi") == 64 * 2**30
    assert quantity("8") == 8
    assert quantity(None) == 0


def test_the_cluster_report_counts_running_gpus_per_node_and_shows_pods_as_kubectl_does() -> None:
    pods_by_run = {
        "u": [pod(0, node="n0"), pod(1, node="n1")],
        "v": [
            pod(0, name="v-a2-0", run_uid="v", attempt=2, node=None, phase="Pending", gated=True)
        ],
        "w": [pod(0, name="w-a1-0", run_uid="w", deleting=True)],
    }
    capacity = gang.Capacity()
    for facts in (
        node("n1", labels={cluster_report.GPU_PRODUCT_LABEL: "NVIDIA-H200"}),
        node("n0", ready=False),
        node("cpu", gpus=0, unschedulable=True),
    ):
        capacity.node_seen(facts)
    capacity.pod_seen(("ns", "a"), use("n0", Demand(gpus=8)))
    capacity.pod_seen(("ns", "b"), use("n1", Demand(gpus=4)))
    capacity.pod_seen(("ns", "c"), use("n1", Demand(gpus=2)))
    capacity.pod_seen(("ns", "d"), use("n1", Demand(gpus=1)))
    capacity.pod_seen(("ns", "d"), PodUse(None, Demand(), released=False, gated=False))  # ended
    report = cluster_report.build_report(
        pods_by_run, capacity.gpus_bound(), capacity.nodes.values()
    )
    assert [
        (n.name, n.ready, n.schedulable, n.gpus_allocatable, n.gpus_allocated) for n in report.nodes
    ] == [
        ("cpu", True, False, 0, 0),
        ("n0", False, True, 8, 8),
        ("n1", True, True, 8, 6),
    ]
    assert report.nodes[2].gpu_product == "NVIDIA-H200"
    assert [(p.name, p.run_uid, p.attempt, p.phase, p.node, p.gpus) for p in report.pods] == [
        ("r-a1-0", "u", 1, "Running", "n0", 8),
        ("r-a1-1", "u", 1, "Running", "n1", 8),
        ("v-a2-0", "v", 2, "SchedulingGated", None, 8),
        ("w-a1-0", "w", 1, "Terminating", "n0", 8),
    ]
