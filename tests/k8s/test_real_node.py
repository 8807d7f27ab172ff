"""The real node of the test cluster (scripts/cluster.d/node.sh) with the images built from
this tree (scripts/images): containers really run there, as a non-root user, with cluster
DNS and the host reachable; and the post-training loop applied with kubectl runs end to end
on real pods, handing datasets and checkpoints from pod to pod through a shared volume."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from benchmarks.calculator_example_figures import played_digests, recorded, rewards_recorded_here
from benchmarks.demo_loop import cpu_model

from crucible.client import ApiError, CrucibleClient
from crucible.demo.loop import QUICK, loop_manifests
from crucible.domain.enums import Phase, Role
from crucible.schemas.tenancy import TokenCreate
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import ADMIN_TOKEN, Stack
from tests.k8s.real_node import (
    ON_REAL_NODE,
    REAL_NODE,
    TOOL_SECCOMP_PROFILE,
    add_shared_storage,
    claim_storage,
    enforce_restricted,
    install_crds,
    losses,
    sft_run,
    stack_on_real_node,
    teacher,
    wait_running_past,
    wait_runs,
)
from tests.servers import crucible, free_port

# The control plane beside the node (operator_stack.Stack) runs on the shared Postgres and Redis.
pytestmark = [pytest.mark.k8s, pytest.mark.realnode, pytest.mark.postgres, pytest.mark.redis]


def _pod(name: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            **ON_REAL_NODE,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
        },
    }


def _wait_pod_done(namespace: str, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pod = h.get_pod(namespace, name)
        if pod and pod["status"].get("phase") in ("Succeeded", "Failed"):
            return pod
        if time.monotonic() > deadline:
            events = h.kubectl("get", "events", "-o", "wide", namespace=namespace, check=False)
            raise AssertionError(f"pod {name} not done after {timeout}s: {pod}\n{events}")
        time.sleep(0.5)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


PROBE = """
import json, os, socket, urllib.request
import torch, crucible
out = {"uid": os.getuid(), "gid": os.getgid(), "torch": torch.__version__,
       "add": torch.tensor([2.0]).add(3).item()}
out["kubernetes"] = socket.gethostbyname("kubernetes.default.svc.cluster.local")
try:
    socket.gethostbyname("deb.debian.org")
    out["outside"] = "resolved"
except OSError as exc:
    out["outside"] = type(exc).__name__
out["host"] = urllib.request.urlopen(os.environ["HOST_URL"], timeout=10).read().decode()
try:
    open("/opt/crucible/x", "w")
    out["root_fs"] = "writable"
except OSError:
    out["root_fs"] = "read-only"
print(json.dumps(out))
"""


# Carries the workload image's build (the `workload_image` fixture) when it is not cached.
@pytest.mark.timeout(2100)
def test_a_pod_runs_the_workload_image_non_root_with_cluster_dns_and_the_host_reachable(
    namespace: str, host_ip: str, workload_image: str
) -> None:
    enforce_restricted(namespace)
    server = http.server.ThreadingHTTPServer((host_ip, free_port()), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pod = _pod("probe", workload_image, ["python", "-c", PROBE])
        pod["spec"]["containers"][0]["env"] = [
            {"name": "HOST_URL", "value": f"http://{host_ip}:{server.server_address[1]}/"}
        ]
        h.create(pod, namespace=namespace)
        done = _wait_pod_done(namespace, "probe", timeout=180)
    finally:
        server.shutdown()
    logs = h.kubectl("logs", "probe", namespace=namespace, check=False)
    assert done["status"]["phase"] == "Succeeded", f"{done['status']}\n{logs}"
    assert done["spec"]["nodeName"] == REAL_NODE
    out = json.loads(logs.strip().splitlines()[-1])
    assert (out["uid"], out["gid"]) == (1000, 1000)
    assert out["add"] == 5.0 and out["torch"].startswith("2.")
    assert out["kubernetes"] == "10.96.0.1"  # the `kubernetes` Service, through CoreDNS
    assert out["outside"] == "gaierror"  # no upstream DNS: nothing resolves off the cluster
    assert out["host"] == "hello from the host"
    assert out["root_fs"] == "read-only"


TOOL_PROBE = """
import ctypes, json, os
from crucible.agents.sandbox import Sandbox
run = Sandbox().run("crucible.agents.envs.calculator:calculate", {"expression": "123 + 456"})
# Any other namespace kind stays refused: a mount namespace beside the user namespace.
libc = ctypes.CDLL(None, use_errno=True)
mount_ns = libc.unshare(0x10000000 | 0x00020000) == 0 or os.strerror(ctypes.get_errno())
print(json.dumps({"tool": [run.outcome, run.value, run.isolation, run.detail],
                  "mount_namespace": mount_ns}))
"""


def _tool_probe(namespace: str, image: str, name: str, seccomp: dict[str, str]) -> dict[str, Any]:
    pod = _pod(name, image, ["python", "-c", TOOL_PROBE])
    pod["spec"]["securityContext"]["seccompProfile"] = seccomp
    # The sandbox's scratch directories go in /tmp; this pod's root filesystem is read-only.
    pod["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    h.create(pod, namespace=namespace)
    done = _wait_pod_done(namespace, name, timeout=180)
    logs = h.kubectl("logs", name, namespace=namespace, check=False)
    assert done["status"]["phase"] == "Succeeded", f"{done['status']}\n{logs}"
    return dict(json.loads(logs.strip().splitlines()[-1]))


def test_tools_in_a_restricted_pod_cut_their_network_under_the_sandboxs_seccomp_profile(
    namespace: str, workload_image: str
) -> None:
    """Under the runtime's default seccomp profile the sandbox cannot make its network
    namespace, so a call with network "none" does not run; under the profile the node has
    (scripts/cluster.d/seccomp) it does, and other namespace kinds stay refused."""
    enforce_restricted(namespace)
    default = _tool_probe(namespace, workload_image, "default", {"type": "RuntimeDefault"})
    outcome, value, isolation, detail = default["tool"]
    assert (outcome, value, isolation) == ("no_isolation", None, None), default
    assert "unshare(CLONE_NEWUSER | CLONE_NEWNET): Operation not permitted" in detail
    localhost = {"type": "Localhost", "localhostProfile": TOOL_SECCOMP_PROFILE}
    sandboxed = _tool_probe(namespace, workload_image, "sandboxed", localhost)
    assert sandboxed == {
        "tool": ["ok", "579", "namespace", ""],
        "mount_namespace": "Operation not permitted",
    }


# --- the loop -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared volume's backing directory: a hostPath PersistentVolume in the test
    cluster, mounted at this same path in every pod, so the workers (processes on this
    machine) read the checkpoints' file:// URIs as the pods wrote them."""
    path = tmp_path_factory.mktemp("shared")
    path.chmod(0o1777)  # the pods' user (1000) writes here
    return path


@pytest.fixture(scope="module")
def real_stack(
    cluster: h.Cluster,
    host_ip: str,
    workload_image: str,
    shared_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    install_crds()
    stack = stack_on_real_node(
        tmp_path_factory.mktemp("real-stack"),
        cluster.env(),
        host_ip=host_ip,
        image=workload_image,
        storage=claim_storage(shared_dir),
    )
    stack.start()
    yield stack
    stack.stop()


@pytest.fixture
def storage_ns(namespace: str, shared_dir: Path, real_stack: Stack) -> Iterator[str]:
    """A namespace with the shared claim bound to the shared directory, where PodSecurity
    admission enforces the restricted standard."""
    enforce_restricted(namespace)
    volume = add_shared_storage(namespace, shared_dir)
    yield namespace
    h.kubectl("delete", "crucible", "--all", "--wait=false", namespace=namespace, check=False)
    h.kubectl("delete", "pv", volume, "--wait=false", check=False)


@pytest.mark.slow
@pytest.mark.timeout(2220)  # the loop (1,400 s at most), then the rollouts on 4 pods
def test_the_loop_applied_with_kubectl_runs_end_to_end_on_real_pods(
    storage_ns: str, real_stack: Stack, shared_dir: Path
) -> None:
    manifests = loop_manifests("rn", QUICK)  # as `crucible demo --quick` submits them
    for manifest in manifests:
        manifest["metadata"]["namespace"] = storage_ns
    items = {"apiVersion": "v1", "kind": "List", "items": manifests}
    h.kubectl("apply", "-f", "-", input=json.dumps(items))
    names = [m["metadata"]["name"] for m in manifests]

    with CrucibleClient(real_stack.url, ADMIN_TOKEN) as api:

        def finished() -> list[Any] | None:
            try:
                listed = api.list_runs(project=storage_ns, limit=100).items
            except ApiError as exc:  # 404 until the operator has registered the namespace
                if exc.status != 404:
                    raise
                return None
            runs = {r.name: r for r in listed}
            stages = [runs.get(name) for name in names]
            if any(r is not None and r.phase in (Phase.Failed, Phase.Cancelled) for r in stages):
                return list(runs.values())
            if not all(r is not None and r.phase == Phase.Succeeded for r in stages):
                return None
            evals = [r for r in runs.values() if r.kind == "eval"]
            checkpoints = sum(
                len(api.list_checkpoints(runs[n].id).items) for n in ("rn-sft", "rn-rl")
            )
            done = len(evals) >= checkpoints and all(e.phase.is_terminal for e in evals)
            return list(runs.values()) if done else None

        runs = real_stack.wait_for("the loop to finish", finished, seconds=1400)
        report = [(r.name, r.phase, r.reason, r.message) for r in runs]
        assert all(r.phase == Phase.Succeeded for r in runs), (report, real_stack.logs())
        by_name = {r.name: r for r in runs}

        # Each stage read what the one before wrote, through the shared volume.
        for run in runs:
            for checkpoint in api.list_checkpoints(run.id).items:
                assert checkpoint.uri.startswith(f"file://{shared_dir}/runs/{run.id}/"), checkpoint
        for dataset in ("rn-sft-data", "rn-rollouts"):
            version = api.resolve_dataset(storage_ns, f"{dataset}@latest")
            assert version.uri.startswith(f"file://{shared_dir}/runs/"), version

        sft = sorted(api.list_run_evals(by_name["rn-sft"].id), key=lambda e: e.step)
        assert [e.step for e in sft] == [0, QUICK.sft_steps]
        assert sft[-1].scores["accuracy"] > sft[0].scores["accuracy"]
        assert api.list_run_evals(by_name["rn-rl"].id)

    # The rollouts again on four replicas, each a pod sampling its share of the prompts:
    # the same dataset, to the digest.
    (rollouts,) = [m for m in manifests if m["metadata"]["name"] == "rn-rollouts"]
    fanned = json.loads(json.dumps(rollouts))
    fanned["metadata"]["name"] = "rn-rollouts-x4"
    fanned["spec"].update(output="rn-rollouts-x4", replicas=4)
    h.kubectl("apply", "-f", "-", input=json.dumps(fanned))
    fanned_run = wait_runs(real_stack, storage_ns, ["rn-rollouts-x4"], seconds=600)[
        "rn-rollouts-x4"
    ]
    assert fanned_run.phase == Phase.Succeeded, (fanned_run.message, real_stack.logs())
    with CrucibleClient(real_stack.url, ADMIN_TOKEN) as api:
        one = api.resolve_dataset(storage_ns, "rn-rollouts@latest")
        four = api.resolve_dataset(storage_ns, "rn-rollouts-x4@latest")
    assert (four.digest, four.record_count) == (one.digest, one.record_count)

    pods = h.kubectl_json("get", "pods", "-o", "json", namespace=storage_ns)["items"]
    assert len(pods) >= len(runs) + 4, [p["metadata"]["name"] for p in pods]
    assert sum(p["metadata"]["name"].startswith("rn-rollouts-x4") for p in pods) == 4
    assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods), [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods
    ]


# --- hand-offs between attempts and between pods --------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1740)
def test_an_evicted_attempt_checkpoints_to_shared_storage_and_the_next_pod_resumes_bitwise(
    storage_ns: str, real_stack: Stack, shared_dir: Path
) -> None:
    producer = teacher(storage_ns, "ev")
    steps = {"steps": 400}
    every = {"everySteps": 200, "keepLast": 5}
    evicted = sft_run(storage_ns, "evicted", "ev-teacher", checkpoints=every)
    steady = sft_run(storage_ns, "steady", "ev-teacher", checkpoints=every)
    for run in (evicted, steady):
        run["spec"]["config"]["train"].update(steps)
    h.apply(producer, evicted, steady)

    first = wait_running_past(real_stack, storage_ns, "evicted", 60)
    h.evict_pod(storage_ns, "evicted-a1-0")  # the Eviction API, as `kubectl drain` uses

    runs = wait_runs(real_stack, storage_ns, ["evicted", "steady"], seconds=600)
    assert runs["evicted"].phase == Phase.Succeeded, (runs["evicted"], real_stack.logs())
    attempts = real_stack.get(f"/runs/{first['id']}/attempts")
    assert [a["end_reason"] for a in attempts] == ["Evicted", "Completed"], attempts
    # SIGTERM made the SDK save where the attempt was (not only at step 200), into the
    # shared volume, and the new pod started from that checkpoint.
    resumed_from = attempts[1]["resumed_from_checkpoint_id"]
    assert resumed_from is not None, attempts
    checkpoint = real_stack.get(f"/checkpoints/{resumed_from}")
    assert checkpoint["uri"].startswith(f"file://{shared_dir}/runs/{first['id']}/checkpoints/")
    assert 60 <= checkpoint["step"] < 400 and checkpoint["step"] != 200, checkpoint
    # The losses of the interrupted run are bitwise those of the uninterrupted one.
    assert losses(real_stack, first["id"]) == losses(real_stack, runs["steady"].id)

    # Each attempt kept the digest the kubelet resolved for its image; reproducing the
    # steady run pins it, and the reproduction's losses are bitwise the same again.
    steady_attempts = real_stack.get(f"/runs/{runs['steady'].id}/attempts")
    assert all("@sha256:" in (a["image_id"] or "") for a in attempts + steady_attempts), (
        attempts + steady_attempts
    )
    cli_env = {**os.environ, "CRUCIBLE_API_URL": real_stack.url, "CRUCIBLE_TOKEN": ADMIN_TOKEN}
    reproduced = crucible(cli_env, "runs", "reproduce", str(runs["steady"].id))
    assert reproduced.returncode == 0, reproduced.stderr
    again = wait_runs(real_stack, storage_ns, ["steady-r1"], seconds=600)["steady-r1"]
    assert again.phase == Phase.Succeeded, (again, real_stack.logs())
    assert again.manifest["spec"]["image"] == steady_attempts[0]["image_id"]
    assert losses(real_stack, again.id) == losses(real_stack, runs["steady"].id)


CALCULATOR_EXAMPLE = Path(__file__).parents[2] / "examples" / "calculator-rl.yaml"
RL_ROUNDS, RL_EPISODES = 16, 128


def calculator_runs(namespace: str) -> list[dict[str, Any]]:
    """examples/calculator-rl.yaml's runs on the real node: the demonstrations, the SFT run,
    and the RL run with its generator in a pod of its own (addresses and weights through the
    shared volume, requests over the pod network), without its evals (the local mode's test
    scores every checkpoint; here each eval would add a pod)."""
    demos, sft, rl = yaml.safe_load_all(CALCULATOR_EXAMPLE.read_text())
    rl["spec"]["config"]["online"]["generator"] = "pod"
    del rl["spec"]["evals"]
    for manifest in (demos, sft, rl):
        manifest["metadata"]["namespace"] = namespace
        manifest["spec"]["scheduling"] = ON_REAL_NODE
    return [demos, sft, rl]


def series(stack: Stack, run_id: int, key: str) -> dict[int, float]:
    (found,) = stack.get(f"/runs/{run_id}/metrics", keys=key)["series"]
    return dict(zip(found["steps"], found["values"], strict=True))


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_calculator_agent_learns_on_real_pods_and_an_evicted_run_resumes_exactly(
    storage_ns: str, real_stack: Stack, shared_dir: Path
) -> None:
    """The tool-using agent from demonstrations to online RL, each stage a pod whose tools
    run in the sandbox (the node's seccomp profile); the RL run, its generator a pod of its
    own, has its trainer evicted after its third round and plays the rounds the local mode's run
    played (benchmarks/results/calculator_example.json), with the same rewards where a run
    on this CPU model was recorded."""
    h.apply(*calculator_runs(storage_ns))
    first = wait_running_past(real_stack, storage_ns, "calculator-rl", 3, seconds=1500)
    h.evict_pod(storage_ns, "calculator-rl-a1-0")

    names = ["calculator-demos", "calculator-sft", "calculator-rl"]
    runs = wait_runs(real_stack, storage_ns, names, seconds=900)
    for name in names:
        assert runs[name].phase == Phase.Succeeded, (runs[name], real_stack.logs())
    # Every demonstration ran its tool calls: none failed, and all 512 were kept.
    demos_run = runs["calculator-demos"].id
    assert series(real_stack, demos_run, "episodes/failed") == {0: 0.0}
    assert series(real_stack, demos_run, "episodes/kept") == {0: 512.0}
    attempts = real_stack.get(f"/runs/{first['id']}/attempts")
    assert [a["end_reason"] for a in attempts] == ["Evicted", "Completed"], attempts
    # SIGTERM let the round end and saved it (a checkpoint off the every-4 grid, unless the
    # eviction came right after one), into the shared volume; the next pod resumed there.
    checkpoint = real_stack.get(f"/checkpoints/{attempts[1]['resumed_from_checkpoint_id']}")
    assert checkpoint["uri"].startswith(f"file://{shared_dir}/runs/{first['id']}/checkpoints/")
    assert 3 <= checkpoint["step"] < RL_ROUNDS and checkpoint["meta"]["mode"] == "online"
    assert checkpoint["meta"]["policy"]["update"] == checkpoint["step"]

    # Every round once; the reward rises, every round calls the tool in most episodes, and
    # none failed.
    reward = series(real_stack, first["id"], "reward")
    assert sorted(reward) == list(range(1, RL_ROUNDS + 1)), reward
    curve = [reward[r] for r in sorted(reward)]
    assert sum(curve[-4:]) / 4 > sum(curve[:4]) / 4 + 0.1, curve
    assert set(series(real_stack, first["id"], "rl/episodes_failed").values()) == {0.0}
    tool_calls = series(real_stack, first["id"], "rl/tool_calls_per_episode")
    assert min(tool_calls.values()) > 0.5, tool_calls
    outputs = shared_dir / "runs" / str(first["id"]) / "outputs"
    # The rounds the local mode's run played, from the same seeds: a resume that lost,
    # repeated or reordered a batch would not.
    assert played_digests(outputs / "trajectories") == recorded()["played"]
    # And their rewards, where the local mode's run was recorded on this CPU model (another
    # model's matmul kernels train another SFT checkpoint from the same seed). Within two
    # episodes a round: the engine's batches, which follow when each tool call returns, move
    # its logprobs in the last bits (docs/agents.md, "On the real node"); in the runs so
    # far, not one token.
    expected = rewards_recorded_here()
    if expected is not None:
        assert curve == pytest.approx(expected, abs=2 / RL_EPISODES + 1e-4), cpu_model()
    # Its generator, a pod of each attempt that wrote its address to the shared volume,
    # took every update through a file there, each removed once the next was loaded and
    # the last at the end.
    updates = series(real_stack, first["id"], "rl/weight_update_s")
    assert len(updates) == RL_ROUNDS and all(s > 0 for s in updates.values()), updates
    assert list((outputs / "policy-weights").iterdir()) == []
    for attempt in (1, 2):
        address = json.loads((outputs / "generators" / f"attempt-{attempt}" / "0.json").read_text())
        assert address["host"] != "127.0.0.1" and address["port"] > 0, address
    # The trajectories: every batch once, published by the run.
    data = real_stack.get(
        "/datasets/resolve", project=storage_ns, ref="calculator-rl-trajectories@latest"
    )
    assert data["record_count"] == RL_ROUNDS * RL_EPISODES
    assert data["produced_by_run_id"] == first["id"]
    # Each episode's policy descends from the SFT checkpoint, trained on the demonstrations.
    sft_checkpoint = data["schema"]["policy_start_checkpoint"]
    assert real_stack.get(f"/checkpoints/{sft_checkpoint}")["run_id"] == runs["calculator-sft"].id
    demos = real_stack.get("/datasets/resolve", project=storage_ns, ref="calculator-demos@latest")
    assert demos["produced_by_run_id"] == runs["calculator-demos"].id


def test_workload_namespaces_enforce_the_restricted_pod_security_standard(storage_ns: str) -> None:
    """Every workload pod of these tests runs where the API server refuses what `restricted`
    forbids, so their passing shows the operator's pods meet it."""
    privileged = _pod("privileged", "registry.invalid/none:0", ["true"])
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refused = h.kubectl_result("-n", storage_ns, "create", "-f", "-", input=json.dumps(privileged))
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr


@pytest.mark.timeout(360)
def test_an_image_that_cannot_be_pulled_fails_the_run_with_the_reason(
    storage_ns: str, real_stack: Stack
) -> None:
    run = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "no-image", "namespace": storage_ns},
        "spec": {
            "experiment": "real-node",
            "image": "crucible.local/does-not-exist:1",
            "recovery": {"maxFailures": 0},
            "scheduling": ON_REAL_NODE,
        },
    }
    h.apply(run)
    runs = wait_runs(real_stack, storage_ns, ["no-image"], seconds=240)
    failed = runs["no-image"]
    assert failed.phase == Phase.Failed, failed
    attempts = real_stack.get(f"/runs/{failed.id}/attempts")
    assert attempts[-1]["end_reason"] == "ImagePullFailed", attempts
    assert "crucible.local/does-not-exist:1" in attempts[-1]["message"], attempts


# --- a served checkpoint ----------------------------------------------------------------------


def _served_status(namespace: str, name: str) -> dict[str, Any]:
    found = h.kubectl("get", "servedmodel", name, "-o", "json", namespace=namespace, check=False)
    return (json.loads(found).get("status") or {}) if found else {}


def _wait_served(stack: Stack, namespace: str, name: str, checkpoint: int) -> None:
    """Ready on `checkpoint` with no pod of another template left (a roll finished)."""

    def settled() -> bool:
        status = _served_status(namespace, name)
        pods = h.kubectl_json(
            "get", "pods", "-l", f"crucible.dev/served-model={name}", namespace=namespace
        )["items"]
        return (
            status.get("phase") == "Ready"
            and (status.get("checkpoint") or {}).get("id") == checkpoint
            and len(pods) == status.get("replicas")
        )

    stack.wait_for(f"{name} serving checkpoint {checkpoint} alone", settled, seconds=420)


def _streamed(base: str, token: str) -> str:
    """One streamed completion on a connection of its own (so a pod's going away can only
    cut a request in flight, never an idle kept-alive connection): 'ok' or what went wrong."""
    body = {"model": "arith", "prompt": "12+7=", "max_tokens": 24, "stream": True}
    body["ignore_eos"] = True
    try:
        with (
            httpx.Client(timeout=60, headers={"Connection": "close"}) as client,
            client.stream(
                "POST",
                f"{base}/completions",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ) as answer,
        ):
            if answer.status_code != 200:
                return f"HTTP {answer.status_code}: {answer.read().decode()[:200]}"
            lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if lines and lines[-1] == "data: [DONE]" else f"cut short: {lines[-1:]}"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_served_checkpoint_answers_through_its_service_and_a_promotion_drops_no_request(
    storage_ns: str, real_stack: Stack
) -> None:
    sft = sft_run(storage_ns, "sv-sft", "sv-teacher", checkpoints={"everySteps": 20})
    sft["spec"]["config"]["train"]["steps"] = 40
    h.apply(teacher(storage_ns, "sv"), sft)
    run = wait_runs(real_stack, storage_ns, ["sv-sft"], seconds=600)["sv-sft"]
    assert run.phase == Phase.Succeeded, (run, real_stack.logs())
    with CrucibleClient(real_stack.url, ADMIN_TOKEN) as api:
        steps = sorted((c.step, c.id) for c in api.list_checkpoints(run.id).items)
        reader = TokenCreate(name="a client", project=storage_ns, role=Role.viewer)
        token = api.create_token(reader).token
    (_, first), (_, last) = steps[0], steps[-1]

    served = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "ServedModel",
        "metadata": {"name": "arith", "namespace": storage_ns},
        "spec": {"checkpoint": {"id": first}, "replicas": 1},
    }
    h.apply(served)
    _wait_served(real_stack, storage_ns, "arith", first)
    service = h.kubectl_json("get", "service", "arith", namespace=storage_ns)
    base = f"http://{service['spec']['clusterIP']}:8000/v1"  # kube-proxy routes it from here

    # The OpenAI client, with a Crucible token of the project.
    client = openai.OpenAI(base_url=base, api_key=token, max_retries=0, timeout=60)
    (card,) = client.models.list().data
    assert (card.id, (card.model_extra or {})["root"]) == ("arith", f"checkpoint-{first}")
    answer = client.completions.create(model="arith", prompt="3+4=", max_tokens=3, temperature=0)
    assert answer.usage is not None and answer.usage.completion_tokens >= 1, answer
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="cru_wrong", max_retries=0).models.list()

    # Promoted under load: streams keep coming while the new pod starts, takes over and the
    # old one drains; none of them is refused or cut short.
    stop = threading.Event()

    def keep_asking() -> list[str]:
        outcomes = []
        while not stop.is_set():
            outcomes.append(_streamed(base, token))
        return outcomes

    with ThreadPoolExecutor(2) as pool:
        clients = [pool.submit(keep_asking) for _ in range(2)]
        time.sleep(2)
        h.kubectl(
            "patch",
            "servedmodel",
            "arith",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"checkpoint": {"id": last}}}),
            namespace=storage_ns,
        )
        try:
            _wait_served(real_stack, storage_ns, "arith", last)
            time.sleep(2)  # past the old pod's going
        finally:
            stop.set()
        outcomes = [o for c in clients for o in c.result()]
    failures = [o for o in outcomes if o != "ok"]
    assert not failures and len(outcomes) >= 10, (len(outcomes), failures[:5])
    (card,) = client.models.list().data
    assert (card.model_extra or {})["root"] == f"checkpoint-{last}"
    with CrucibleClient(real_stack.url, ADMIN_TOKEN) as api:
        (deployment,) = api.list_deployments(project=storage_ns).items
    assert (deployment.name, deployment.serving_checkpoint_id) == ("arith", last)
