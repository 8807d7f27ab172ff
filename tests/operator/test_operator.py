"""The operator on the real cluster: custom resources applied with kubectl become gang-gated
GPU pods on kwok nodes, are registered in the control plane (on Postgres) with their
attempts and events, recover through the workers after evictions and lost nodes, and are
cleaned up when deleted. The control plane, worker and operator run as the processes a
deployment runs (tests/k8s/operator_stack.py)."""

from __future__ import annotations

import json
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from crucible_operator import naming
from tests.checkpoint_files import ROOT, checkpoint_files
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

pytestmark = [pytest.mark.k8s, pytest.mark.postgres, pytest.mark.redis]

GPU = "nvidia.com/gpu"


def training_run(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "ops", "image": "registry.invalid/train:1", **spec},
    }


def pods_of(namespace: str, run: str, attempt: int | None = None) -> list[dict[str, Any]]:
    selector = f"{naming.LABEL_RUN}={run}"
    if attempt is not None:
        selector += f",{naming.LABEL_ATTEMPT}={attempt}"
    items: list[dict[str, Any]] = h.kubectl_json(
        "get", "pods", "-l", selector, namespace=namespace
    )["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def resource(namespace: str, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = h.kubectl_json("get", kind, name, namespace=namespace)
    return obj


def phase_of(namespace: str, kind: str, name: str) -> str | None:
    found = h.kubectl("get", kind, name, "-o", "json", namespace=namespace, check=False)
    phase: str | None = (json.loads(found).get("status") or {}).get("phase") if found else None
    return phase


def wait_phase(stack: Stack, namespace: str, name: str, *phases: str, kind: str = "tr") -> None:
    stack.wait_for(
        f"{kind}/{name} in {phases}",
        lambda: phase_of(namespace, kind, name) in phases,
        seconds=90,
    )


def wait_running_pods(
    stack: Stack, namespace: str, run: str, attempt: int, count: int
) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]] | None:
        pods = pods_of(namespace, run, attempt)
        ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods: list[dict[str, Any]] = stack.wait_for(f"{count} running pods of {run}", running, 90)
    return pods


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from secret>") for e in pod["spec"]["containers"][0]["env"]}


def finish_all(namespace: str, pods: list[dict[str, Any]], code: int = 0, **kw: Any) -> None:
    for pod in pods:
        h.finish_pod(namespace, pod["metadata"]["name"], code, **kw)


def api_run(stack: Stack, namespace: str, name: str) -> dict[str, Any]:
    run: dict[str, Any] = stack.wait_for(
        f"run {name} in the API", lambda: stack.run_by_name(namespace, name)
    )
    return run


def test_two_nodes_of_four_gpus_become_a_gang_with_a_service_and_torchrun_env(
    stack: Stack, ns: str
) -> None:
    h.apply(training_run("sft", nodes=2, gpusPerNode=4), namespace=ns)
    pods = wait_running_pods(stack, ns, "sft", 1, 2)

    assert [p["metadata"]["name"] for p in pods] == ["sft-a1-0", "sft-a1-1"]
    run = api_run(stack, ns, "sft")
    for rank, pod in enumerate(pods):
        container = pod["spec"]["containers"][0]
        assert container["resources"]["requests"][GPU] == "4"
        assert container["resources"]["limits"][GPU] == "4"
        assert pod["spec"]["nodeName"]  # bound (to a kwok node)
        assert not pod["spec"].get("schedulingGates")  # the gate was lifted for both
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "TrainingRun"
        env = env_of(pod)
        assert env["MASTER_ADDR"] == f"sft-a1-0.sft.{ns}.svc"
        assert env["NNODES"] == "2"
        assert env["NODE_RANK"] == str(rank)
        assert env["NPROC_PER_NODE"] == "4"
        assert env["CRUCIBLE_RUN_ID"] == str(run["id"])
        assert env["CRUCIBLE_ATTEMPT"] == "1"
        assert env["CRUCIBLE_TOKEN"] == "<from secret>"
        assert container["command"][:2] == ["torchrun", "--nnodes=2"]
    service = resource(ns, "service", "sft")
    assert service["spec"]["clusterIP"] == "None"
    assert pods[0]["spec"]["subdomain"] == "sft"
    wait_phase(stack, ns, "sft", "Running")

    # The operator's cluster report, for the dashboard: the run's pods with their nodes and
    # GPUs, and every node's GPUs with those pods' counted as allocated.
    expected = [(p["metadata"]["name"], p["spec"]["nodeName"], 4, "Running") for p in pods]
    stack.wait_for(
        "the run's pods in the cluster report",
        lambda: (
            [
                (p["name"], p["node"], p["gpus"], p["phase"])
                for p in stack.get(f"/runs/{run['id']}/pods")
            ]
            == expected
        ),
    )
    (cluster,) = stack.get("/cluster")["clusters"]
    nodes = {n["name"]: n for n in cluster["nodes"]}
    assert set(nodes) == {n["metadata"]["name"] for n in h.kubectl_json("get", "nodes")["items"]}
    for _, node, _, _ in expected:
        assert nodes[node]["gpus_allocated"] >= 4
        assert nodes[node]["gpus_allocatable"] == 8
        assert nodes[node]["gpu_product"] == "NVIDIA-H200"

    finish_all(ns, pods, 0)
    wait_phase(stack, ns, "sft", "Succeeded")
    run = stack.get(f"/runs/{run['id']}")
    assert run["phase"] == "Succeeded"
    assert run["backend"] == "kubernetes"
    assert run["k8s_namespace"] == ns
    attempts = stack.get(f"/runs/{run['id']}/attempts")
    assert [(a["number"], a["end_reason"], a["exit_code"]) for a in attempts] == [
        (1, "Completed", 0)
    ]
    events = [e["type"] for e in stack.get(f"/runs/{run['id']}/events")]
    assert events[0] == "Submitted" and "AttemptStarted" in events and "AttemptEnded" in events
    status = resource(ns, "tr", "sft")["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "True" and conditions["Scheduled"] == "True"
    assert status["runId"] == run["id"] and status["attempt"] == 1

    # kopf posts events from a background queue, so the last one can land a moment after the
    # status it follows: wait for it rather than read once.
    seen: set[str] = set()

    def k8s_event_reasons() -> set[str]:
        items = h.kubectl_json(
            "get", "events", "--field-selector", "involvedObject.name=sft", namespace=ns
        )["items"]
        seen.clear()  # the latest read, for the failure's message
        seen.update(e["reason"] for e in items)
        return seen

    expected_reasons = {"Registered", "AttemptStarted", "Running", "Completed"}
    try:
        stack.wait_for(
            "the run's Kubernetes events",
            lambda: expected_reasons <= k8s_event_reasons(),
            seconds=30,
        )
    except AssertionError as exc:
        raise AssertionError(f"events seen: {sorted(seen)}; {exc}") from None


def test_a_gang_that_cannot_fit_waits_unschedulable_and_binds_nothing(
    stack: Stack, ns: str
) -> None:
    nodes = len(h.fake_nodes())
    h.apply(training_run("huge", nodes=nodes + 1, gpusPerNode=8), namespace=ns)
    run = api_run(stack, ns, "huge")
    stack.wait_for(
        "Unschedulable in the API",
        lambda: stack.get(f"/runs/{run['id']}")["reason"] == "Unschedulable",
    )
    time.sleep(2)  # a later pass must not release part of the gang either
    pods = pods_of(ns, "huge")
    assert len(pods) == nodes + 1
    assert all(p["spec"].get("schedulingGates") for p in pods)
    assert not any(p["spec"].get("nodeName") for p in pods)
    run = stack.get(f"/runs/{run['id']}")
    assert run["phase"] == "Scheduling"
    assert f"needs {nodes + 1} pod(s) with 8 GPU(s) each" in run["message"]
    scheduled = next(
        c for c in resource(ns, "tr", "huge")["status"]["conditions"] if c["type"] == "Scheduled"
    )
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")


def gpus_requested(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
        for c in pod["spec"]["containers"]
    )


def free_whole_nodes(stack: Stack) -> int:
    """Ready fake nodes with none of their GPUs requested by a pod that has not ended, once
    no GPU pod on them is still terminating (earlier tests' pods freeing GPUs later would
    change the count). Pods without GPUs (the Helm tests' deployments) and pods on lost
    nodes (terminating for good) do not count."""
    ready = {
        n["metadata"]["name"]
        for n in h.fake_nodes()
        if h.node_ready_status(n["metadata"]["name"]) == "True"
    }

    def on_ready_nodes() -> tuple[list[dict[str, Any]]] | None:
        items = [
            p
            for p in h.kubectl_json("get", "pods", "-A")["items"]
            if p["spec"].get("nodeName") in ready and gpus_requested(p)
        ]
        leaving = [p for p in items if p["metadata"].get("deletionTimestamp")]
        return None if leaving else (items,)  # (a tuple: an empty list is an answer too)

    (pods,) = stack.wait_for("no GPU pod terminating on a Ready node", on_ready_nodes, 90)
    taken = {
        p["spec"]["nodeName"]
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    }
    return len(ready - taken)


def test_gangs_applied_at_once_never_count_the_same_gpus(stack: Stack, ns: str) -> None:
    """Gangs that fit are created ungated at once, gangs that do not wait behind the gate:
    with one gang more than the free nodes hold, exactly that one waits, whole."""
    fits = free_whole_nodes(stack) // 2
    assert fits >= 1, "the test cluster has no two free nodes"
    names = [f"g{i}" for i in range(fits + 1)]
    h.apply(*(training_run(n, nodes=2, gpusPerNode=8) for n in names), namespace=ns)

    def settled() -> tuple[list[str], list[str]] | None:
        phases = {n: phase_of(ns, "tr", n) for n in names}
        running = [n for n, p in phases.items() if p == "Running"]
        waiting = [
            n
            for n in names
            if n not in running and api_run(stack, ns, n)["reason"] == "Unschedulable"
        ]
        return (running, waiting) if len(running) == fits and len(waiting) == 1 else None

    running, waiting = stack.wait_for(f"{fits} gangs Running, one waiting", settled, 120)
    time.sleep(2)  # a later pass must not release the waiting gang, or part of it
    for name in running:
        assert all(not p["spec"].get("schedulingGates") for p in pods_of(ns, name))
    left = pods_of(ns, waiting[0])
    assert len(left) == 2
    assert all(p["spec"].get("schedulingGates") and not p["spec"].get("nodeName") for p in left)
    bound = [p for n in names for p in pods_of(ns, n) if p["spec"].get("nodeName")]
    assert len({p["spec"]["nodeName"] for p in bound}) == len(bound) == 2 * fits


def test_a_waiting_gang_starts_when_finished_pods_that_are_kept_free_their_gpus(
    stack: Stack, ns: str
) -> None:
    """Pods that ended stay (their logs are read), but their GPUs are free again."""
    free = free_whole_nodes(stack)
    assert free >= 1, "no fake node is free"
    ends = {"podAnnotations": {h.FAKE_EXIT_CODE: "0", h.FAKE_RUN_DURATION: "4s"}}
    h.apply(training_run("first", nodes=free, gpusPerNode=8, scheduling=ends), namespace=ns)
    wait_running_pods(stack, ns, "first", 1, free)
    h.apply(training_run("second", nodes=free, gpusPerNode=8), namespace=ns)
    second = api_run(stack, ns, "second")
    stack.wait_for(
        "the second gang Unschedulable while the first runs",
        lambda: stack.get(f"/runs/{second['id']}")["reason"] == "Unschedulable",
    )
    wait_phase(stack, ns, "first", "Succeeded")
    kept = pods_of(ns, "first")
    assert len(kept) == free and all(p["status"]["phase"] == "Succeeded" for p in kept)
    wait_running_pods(stack, ns, "second", 1, free)


def test_an_eviction_is_an_interruption_and_the_next_attempt_resumes_from_the_checkpoint(
    stack: Stack, ns: str
) -> None:
    h.apply(training_run("evicted", gpusPerNode=2), namespace=ns)
    (pod,) = wait_running_pods(stack, ns, "evicted", 1, 1)
    run = api_run(stack, ns, "evicted")
    checkpoint = stack.post(
        f"/runs/{run['id']}/checkpoints",
        {"step": 100, **checkpoint_files(run["id"], 100, "a")},
    )

    h.evict_pod(ns, pod["metadata"]["name"])

    (resumed,) = wait_running_pods(stack, ns, "evicted", 2, 1)
    assert env_of(resumed)["CRUCIBLE_RESUME_FROM"] == str(checkpoint["id"])
    assert env_of(resumed)["CRUCIBLE_ATTEMPT"] == "2"
    attempts = stack.get(f"/runs/{run['id']}/attempts")
    assert attempts[0]["end_reason"] == "Evicted"
    assert attempts[1]["start_reason"] == "preemption"
    assert attempts[1]["resumed_from_checkpoint_id"] == checkpoint["id"]
    assert pods_of(ns, "evicted", 1) == []  # the evicted attempt left nothing behind
    wait_phase(stack, ns, "evicted", "Running")
    assert resource(ns, "tr", "evicted")["status"]["latestCheckpoint"]["id"] == checkpoint["id"]


def test_checkpoints_reach_the_status_and_a_preempt_request_drains_without_reading_the_run(
    stack: Stack, ns: str
) -> None:
    """Both come with the event feed's wake-up (feed.py): the loop neither reads the run nor
    looks the checkpoint or the events up for them."""
    h.apply(training_run("asked", gpusPerNode=2), namespace=ns)
    wait_running_pods(stack, ns, "asked", 1, 1)
    wait_phase(stack, ns, "asked", "Running")
    run = api_run(stack, ns, "asked")
    before = stack.operator_calls()
    checkpoints = []
    for step in (100, 200, 300, 400, 500):
        checkpoints.append(
            stack.post(
                f"/runs/{run['id']}/checkpoints",
                {"step": step, **checkpoint_files(run["id"], step, "b")},
            )
        )
        stack.wait_for(
            f"the status showing the checkpoint at step {step}",
            lambda: (
                (resource(ns, "tr", "asked")["status"].get("latestCheckpoint") or {}).get("id")
                == checkpoints[-1]["id"]
            ),
            seconds=30,
        )
    during = stack.operator_calls()
    stack.post(f"/runs/{run['id']}/preempt")
    (resumed,) = wait_running_pods(stack, ns, "asked", 2, 1)
    after = stack.operator_calls()

    assert env_of(resumed)["CRUCIBLE_RESUME_FROM"] == str(checkpoints[-1]["id"])
    attempts = stack.get(f"/runs/{run['id']}/attempts")
    assert attempts[0]["end_reason"] == "Preempted"
    assert attempts[1]["resumed_from_checkpoint_id"] == checkpoints[-1]["id"]

    def calls(since: dict[str, float], until: dict[str, float], call: str) -> float:
        return until.get(call, 0) - since.get(call, 0)

    # A loop looks its run's latest checkpoint and events up once, before the feed covers
    # them; not once per checkpoint, and not for the preempt request.
    for call in ("latest_checkpoint", "list_events"):
        assert calls(before, during, call) <= 1, call
        assert calls(during, after, call) == 0, call
    # Its own phase report may come back through the feed as a change; the checkpoints never.
    assert calls(before, during, "get_run") < len(checkpoints)


def test_an_oom_is_an_application_failure_and_spends_the_failure_budget(
    stack: Stack, ns: str
) -> None:
    h.apply(
        training_run("oom", gpusPerNode=1, recovery={"maxFailures": 1, "backoffSeconds": 0}),
        namespace=ns,
    )
    for attempt in (1, 2):
        pods = wait_running_pods(stack, ns, "oom", attempt, 1)
        finish_all(ns, pods, 137, reason="OOMKilled")
    wait_phase(stack, ns, "oom", "Failed")
    run = api_run(stack, ns, "oom")
    assert run["reason"] == "ReachedMaxFailures"
    attempts = stack.get(f"/runs/{run['id']}/attempts")
    assert [(a["start_reason"], a["end_reason"], a["exit_code"]) for a in attempts] == [
        ("initial", "OOMKilled", 137),
        ("failure-retry", "OOMKilled", 137),
    ]


def test_a_lost_node_moves_the_run_to_another_node(stack: Stack, ns: str) -> None:
    pool = {"crucible.dev/test-pool": ns}
    first = h.add_fake_node(gpus=8, labels=pool)
    try:
        h.apply(
            training_run("nodeloss", gpusPerNode=8, scheduling={"nodeSelector": pool}),
            namespace=ns,
        )
        (pod,) = wait_running_pods(stack, ns, "nodeloss", 1, 1)
        assert pod["spec"]["nodeName"] == first
        second = h.add_fake_node(gpus=8, labels=pool)
        h.lose_node(first, delete=True)

        (moved,) = wait_running_pods(stack, ns, "nodeloss", 2, 1)
        assert moved["spec"]["nodeName"] == second
        run = api_run(stack, ns, "nodeloss")
        attempts = stack.get(f"/runs/{run['id']}/attempts")
        assert attempts[0]["end_reason"] == "NodeLost"
        assert attempts[1]["start_reason"] == "node-lost"
        # The run's reason while the next attempt started ("node-lost") went into the
        # resource's conditions CamelCase; the API server refused such status writes before.
        refused = [
            line
            for line in stack.operator.log.read_text().splitlines()
            if "nodeloss" in line and "is invalid" in line
        ]
        assert refused == []
    finally:
        h.kubectl("delete", "nodes", "-l", f"crucible.dev/test-pool={ns}", check=False)


def test_deleting_the_resource_cancels_the_run_and_removes_its_pods(stack: Stack, ns: str) -> None:
    h.apply(training_run("doomed", gpusPerNode=1), namespace=ns)
    wait_running_pods(stack, ns, "doomed", 1, 1)
    run = api_run(stack, ns, "doomed")
    h.kubectl("delete", "tr", "doomed", "--wait=true", "--timeout=60s", namespace=ns)
    run = stack.get(f"/runs/{run['id']}")
    assert run["phase"] == "Cancelled"  # recorded before the finalizer let it go
    (attempt,) = stack.get(f"/runs/{run['id']}/attempts")
    assert attempt["end_reason"] == "CancelledByUser"
    stack.wait_for("the pods gone", lambda: pods_of(ns, "doomed") == [])


def test_a_rest_submission_becomes_a_resource_the_operator_runs(stack: Stack, ns: str) -> None:
    stack.post("/projects", {"name": ns, "namespace": ns})
    manifest = training_run("viarest", gpusPerNode=1)
    run = stack.post("/runs", {"project": ns, "manifest": manifest, "backend": "kubernetes"})
    stack.wait_for("the TrainingRun", lambda: phase_of(ns, "tr", "viarest") == "Running")
    cr = resource(ns, "tr", "viarest")
    assert cr["metadata"]["annotations"][naming.ANNOTATION_RUN_ID] == str(run["id"])
    assert cr["status"]["runId"] == run["id"]  # adopted, not registered twice
    assert len(stack.get("/runs", project=ns)["items"]) == 1
    assert stack.get(f"/runs/{run['id']}")["k8s_uid"] == cr["metadata"]["uid"]


def test_a_code_package_is_unpacked_by_an_init_container_the_api_server_admits(
    stack: Stack, ns: str
) -> None:
    stack.post("/projects", {"name": ns, "namespace": ns})
    artifact = stack.post(
        "/artifacts",
        {
            "project": ns,
            "kind": "code",
            "name": "team-code",
            "uri": (ROOT / "code" / ns / "team-code.tar").as_uri(),
            "digest": "sha256:" + "c" * 64,
            "size_bytes": 10240,
        },
    )
    h.apply(
        training_run(
            "packaged", codePackage="artifact:team-code", command=["python", "-m", "team.train"]
        ),
        namespace=ns,
    )
    (pod,) = stack.wait_for(
        "the pod of packaged", lambda: pods_of(ns, "packaged", 1) or None, seconds=90
    )
    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == naming.CODE_CONTAINER
    assert init["command"][-3:] == ["crucible.fetch_code", "--into", "/crucible-code"]
    init_env = {e["name"]: e.get("value", "<from secret>") for e in init["env"]}
    assert init_env["CRUCIBLE_CODE_PACKAGE"] == str(artifact["id"])  # pinned by name
    assert init_env["CRUCIBLE_TOKEN"] == "<from secret>"
    assert env_of(pod)["PYTHONPATH"] == "/crucible-code"
    assert {"name": "code", "emptyDir": {}} in pod["spec"]["volumes"]
    workload = pod["spec"]["containers"][0]
    assert {"name": "code", "mountPath": "/crucible-code", "readOnly": True} in workload[
        "volumeMounts"
    ]
    run = api_run(stack, ns, "packaged")
    assert run["resolved_inputs"]["artifacts"] == {"team-code": artifact["id"]}


def test_a_loop_applied_at_once_starts_each_stage_when_its_inputs_appear(
    stack: Stack, ns: str
) -> None:
    rollout = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "gen"},
        "spec": {
            "experiment": "loop",
            "policy": {"teacher": "arithmetic-solver"},
            "output": "sums",
            "gpusPerReplica": 1,
        },
    }
    sft = training_run("sft", gpusPerNode=1, inputs=[{"producedBy": "gen"}])
    h.apply(rollout, sft, namespace=ns)
    (gen_pod,) = wait_running_pods(stack, ns, "gen", 1, 1)
    wait_phase(stack, ns, "sft", "WaitingForInputs")
    assert pods_of(ns, "sft") == []

    # What the generator's workload does through the SDK: publish its dataset, then exit 0.
    gen = api_run(stack, ns, "gen")
    stack.post(
        "/datasets/versions",
        {
            "project": ns,
            "name": "sums",
            "uri": (ROOT / "datasets" / ns / "sums" / "1").as_uri(),
            "digest": "sha256:" + "b" * 64,
            "record_count": 10,
            "produced_by_run_id": gen["id"],
        },
    )
    finish_all(ns, [gen_pod], 0)
    wait_phase(stack, ns, "gen", "Succeeded", kind="rj")
    (sft_pod,) = wait_running_pods(stack, ns, "sft", 1, 1)
    assert json.loads(env_of(sft_pod)["CRUCIBLE_INPUTS"])["datasets"] == ["sums@1"]
    conditions = {c["type"]: c["status"] for c in resource(ns, "tr", "sft")["status"]["conditions"]}
    assert conditions["InputsReady"] == "True"


def test_a_producer_that_fails_fails_its_consumers(stack: Stack, ns: str) -> None:
    rollout = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "gen"},
        "spec": {
            "experiment": "loop",
            "policy": {"teacher": "arithmetic-solver"},
            "output": "sums",
            "gpusPerReplica": 1,
        },
    }
    sft = training_run("sft", gpusPerNode=1, inputs=[{"producedBy": "gen"}])
    h.apply(rollout, sft, namespace=ns)
    # Rollouts get the default budget: one retry after an application failure.
    for attempt in (1, 2):
        (gen_pod,) = wait_running_pods(stack, ns, "gen", attempt, 1)
        finish_all(ns, [gen_pod], 1)
    wait_phase(stack, ns, "gen", "Failed", kind="rj")
    wait_phase(stack, ns, "sft", "Failed")
    run = api_run(stack, ns, "sft")
    assert run["reason"] == "ProducerFailed"
    assert pods_of(ns, "sft") == []


def test_the_operator_killed_mid_reconcile_converges_without_duplicates_or_orphans(
    stack: Stack, ns: str
) -> None:
    count = 50
    tolerate = {"tolerations": [{"key": GPU, "operator": "Exists"}]}
    # Killed the moment the first pod appears (a watch, not a poll: between two polls a fast
    # operator can take all 50 to Running, and the test would then prove nothing).
    watch = subprocess.Popen(
        ["kubectl", "-n", ns, "get", "pods", "--watch", "-o", "name"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        h.apply(*[training_run(f"r{i}", scheduling=tolerate) for i in range(count)], namespace=ns)
        first_pod, _, _ = select.select([watch.stdout], [], [], 90)
        assert first_pod, f"no pod within 90 s\n{stack.logs()}"
        stack.operator.kill()  # SIGKILL, mid-reconcile of the rest
    finally:
        watch.kill()
        watch.wait()
    # Counted after the kill (a dead operator writes no status): reading first would give a
    # fast operator the time to finish before the kill.
    running_at_kill = [
        (r.get("status") or {}).get("phase")
        for r in h.kubectl_json("get", "tr", namespace=ns)["items"]
    ].count("Running")
    stack.operator.start()

    def converged() -> bool:
        phases = [
            (r.get("status") or {}).get("phase")
            for r in h.kubectl_json("get", "tr", namespace=ns)["items"]
        ]
        return phases.count("Running") == count

    stack.wait_for(f"{count} runs Running", converged, seconds=180)
    pods = pods_of_namespace(ns)
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == sorted(f"r{i}-a1-0" for i in range(count))  # one pod each, attempt 1
    owners = {p["metadata"]["ownerReferences"][0]["name"] for p in pods}
    assert owners == {f"r{i}" for i in range(count)}  # none orphaned
    runs = stack.get("/runs", project=ns, limit=1000)["items"]
    assert len(runs) == count
    assert {r["attempt_count"] for r in runs} == {1}
    assert running_at_kill < count  # the kill really interrupted the work


def pods_of_namespace(namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = h.kubectl_json("get", "pods", namespace=namespace)["items"]
    return items


def test_the_kubernetes_examples_pass_the_api_servers_validation(stack: Stack, ns: str) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
    out = h.kubectl("apply", "--dry-run=server", "-f", str(examples), namespace=ns)
    assert "multinode-sft created (server dry run)" in out
    assert "loop-rl created (server dry run)" in out


def test_a_resource_deleted_behind_the_operators_back_is_recorded_cancelled(
    stack: Stack, ns: str
) -> None:
    h.apply(training_run("vanished", gpusPerNode=1), namespace=ns)
    wait_running_pods(stack, ns, "vanished", 1, 1)
    run = api_run(stack, ns, "vanished")
    stack.operator.kill()
    try:
        h.kubectl(
            "patch",
            "tr",
            "vanished",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            namespace=ns,
        )
        h.kubectl("delete", "tr", "vanished", "--wait=true", namespace=ns)
        # The workers' drift repair (every 30 s) notices the resource is gone.
        stack.wait_for(
            "the run Cancelled",
            lambda: stack.get(f"/runs/{run['id']}")["phase"] == "Cancelled",
            seconds=75,
        )
    finally:
        stack.operator.start()
    run = stack.get(f"/runs/{run['id']}")
    assert run["reason"] == "ResourceDeleted"
    (attempt,) = stack.get(f"/runs/{run['id']}/attempts")
    assert attempt["end_reason"] == "ResourceDeleted"


def test_every_checkpoint_gets_one_evaljob_resource_that_reports_its_scores(
    stack: Stack, ns: str
) -> None:
    fake_exit = {"crucible.dev/fake-exit-code": "0", "crucible.dev/fake-run-duration": "1s"}
    h.apply(
        training_run(
            "scored",
            gpusPerNode=1,
            evals=[{"suite": "arith", "gpus": 1}],
        ),
        namespace=ns,
    )
    wait_running_pods(stack, ns, "scored", 1, 1)
    run = api_run(stack, ns, "scored")
    checkpoint = stack.post(
        f"/runs/{run['id']}/checkpoints",
        {
            "step": 10,
            "uri": (ROOT / "runs" / str(run["id"]) / "step-10").as_uri(),
            "digest": "sha256:" + "c" * 64,
            "size_bytes": 1,
        },
    )

    def evaljobs() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = h.kubectl_json("get", "ej", namespace=ns)["items"]
        return items

    (job,) = stack.wait_for("the EvalJob resource", evaljobs)
    name = job["metadata"]["name"]
    assert job["spec"]["checkpoint"] == {"id": checkpoint["id"], "checkpoint": "latest"}
    assert job["spec"]["suite"] == "arith"
    (pod,) = wait_running_pods(stack, ns, name, 1, 1)
    eval_run = api_run(stack, ns, name)
    # What the eval workload does through the SDK: record the scores, then exit 0.
    stack.post(
        "/evals",
        {
            "checkpoint_id": checkpoint["id"],
            "suite": "arith",
            "scores": {"accuracy": 0.75},
            "eval_run_id": eval_run["id"],
        },
    )
    h.kubectl(
        "annotate",
        "pod",
        pod["metadata"]["name"],
        *[f"{k}={v}" for k, v in fake_exit.items()],
        namespace=ns,
    )
    wait_phase(stack, ns, name, "Succeeded", kind="ej")
    assert resource(ns, "ej", name)["status"]["results"] == {"accuracy": 0.75}
    # The trigger delivered again, as the relay republishes a message it presumes lost,
    # and counted once nothing is left for any worker to handle.
    stack.redeliver("checkpoint.registered")
    stack.wait_until_delivered()
    assert len(evaljobs()) == 1


def test_resources_that_cannot_run_say_why_and_never_stall_the_operator(
    stack: Stack, ns: str
) -> None:
    """Resources the API server accepts but that can never run: each settles in a phase with
    a reason, and a good resource applied after them runs at once."""
    eval_job = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "EvalJob",
        "metadata": {"name": "eval-of-nothing"},
        "spec": {"experiment": "ops", "checkpoint": {"id": 999_999}, "suite": "heldout"},
    }
    h.apply(
        training_run("orphan-input", inputs=[{"producedBy": "nobody-makes-this"}]),
        training_run("no-such-node", scheduling={"nodeSelector": {"pool": "does-not-exist"}}),
        training_run("too-big", nodes=64, gpusPerNode=8),
        training_run("init-from-nothing", initFrom={"id": 999_999}),
        training_run(
            "bad-config",
            config={"steps": "many", "lr": None},
            gpusPerNode=1,  # the test cluster's nodes take GPU pods only
            recovery={"maxFailures": 0},
        ),
        eval_job,
        namespace=ns,
    )
    expected = {
        "orphan-input": {("WaitingForInputs", "InputsMissing")},
        "no-such-node": {("Scheduling", "Unschedulable")},
        "too-big": {("Scheduling", "Unschedulable")},
    }
    seen: dict[str, Any] = {}

    def all_settled() -> bool:
        for name in expected:
            run = stack.run_by_name(ns, name) or {}
            seen[name] = (run.get("phase"), run.get("reason"), run.get("message"))
        return all(seen[name][:2] in states for name, states in expected.items())

    try:
        stack.wait_for("each hopeless resource to settle with a reason", all_settled, seconds=90)
    except AssertionError as exc:
        raise AssertionError(f"not as expected: {seen}\n{exc}") from None
    assert "most free GPUs on one node: 8" in seen["too-big"][2]  # nothing else runs
    assert (stack.run_by_name(ns, "init-from-nothing") or {}).get("phase") == "Failed"
    assert phase_of(ns, "ej", "eval-of-nothing") == "Failed"

    # A config is free-form: only the workload can judge it. It gets it as the resource
    # holds it (kubectl apply takes `lr: null` for "no such field"), and its refusal (the
    # reference workloads exit 2 naming the field: tests/workloads/test_jobs.py -k
    # bad_config) fails the run, which has no retries for a failure.
    (pod,) = wait_running_pods(stack, ns, "bad-config", 1, 1)
    applied = resource(ns, "tr", "bad-config")["spec"]["config"]
    assert json.loads(env_of(pod)["CRUCIBLE_CONFIG"]) == applied == {"steps": "many"}
    h.finish_pod(ns, pod["metadata"]["name"], 2)
    wait_phase(stack, ns, "bad-config", "Failed")
    bad = api_run(stack, ns, "bad-config")
    attempts = stack.get(f"/runs/{bad['id']}/attempts")
    assert [(a["end_reason"], a["exit_code"]) for a in attempts] == [("ErrorExit", 2)], attempts
    assert (bad["phase"], bad["reason"]) == ("Failed", "ErrorExit"), bad

    h.apply(training_run("fine", gpusPerNode=1), namespace=ns)
    wait_running_pods(stack, ns, "fine", 1, 1)
    assert stack.operator.process is not None and stack.operator.process.poll() is None
    assert "Traceback" not in stack.operator.tail(2000), stack.operator.tail(200)


def test_a_namespace_whose_name_another_projects_holds_joins_no_project(
    stack: Stack, ns: str
) -> None:
    """A project of this namespace's name owns another namespace: a resource applied here
    must not become a run of that project (its tenants would share names and storage), so
    it is refused with the reason, and nothing is registered."""
    elsewhere = f"{ns[:50]}-else"
    stack.post("/projects", {"name": ns, "namespace": elsewhere})
    h.apply(training_run("squatter", gpusPerNode=1), namespace=ns)

    def failed() -> dict[str, Any] | None:
        resource = h.kubectl_json("get", "tr", "squatter", namespace=ns)
        status = resource.get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = h.wait_for(failed, timeout=60, message="the resource to be refused")
    (condition,) = status["conditions"]
    assert condition["reason"] == "InvalidSpec", condition
    assert f"namespace {ns!r} belongs to no project" in condition["message"], condition
    assert stack.get("/runs", project=ns, limit=10)["items"] == []
