"""The Helm chart on the real node, installed as the README's "On Kubernetes" section says:
its first block runs here as written (namespaces under the restricted Pod Security
standard, the S3 keys as Secrets, `scripts/images chart-values`, `helm install`, the
multi-node example applied with kubectl). Then every part of the release runs in pods: the
migration Job, the API and dashboard, the operator (which reaches the API server through
the `kubernetes` Service), the workers and beat, the bundled Postgres and Redis; the
example trains across two pods and the release's workers evaluate each checkpoint; an
evicted pod's run resumes from its SIGTERM checkpoint on S3.

Its own module: the release's operator watches every namespace, so no other operator may
run beside it (test_real_node's and test_real_node_s3's stacks are module-scoped)."""

from __future__ import annotations

import base64
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import ControlPlane
from tests.k8s.pod_logs import PodLogRecorder
from tests.k8s.real_node import (
    REAL_NODE,
    REPO_ROOT,
    losses,
    sft_run,
    teacher,
    wait_running_past,
    wait_runs,
)

pytestmark = [pytest.mark.k8s, pytest.mark.realnode, pytest.mark.objectstore]

README = REPO_ROOT / "README.md"
RELEASE_NS, PROJECT = "crucible", "demo"  # as the README names them
INSTANCE = "app.kubernetes.io/instance"


def readme_blocks(section: str) -> list[str]:
    """The bash blocks of the README's `## <section>`."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", text[start:end], flags=re.S)


def run_block(block: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """A README block in bash from the repository root, stopping at the first failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRUCIBLE_", "AWS_"))}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def remove_release() -> None:
    """Uninstall and remove both namespaces, whatever an earlier session left."""
    # The runs first, while the release's operator is there to finalize them; a run whose
    # operator is gone (an interrupted session) loses its finalizers instead.
    h.kubectl("delete", "crucible", "--all", "--timeout=120s", namespace=PROJECT, check=False)
    h.helm("uninstall", "crucible", "-n", RELEASE_NS, "--wait", "--timeout", "120s", check=False)
    for leftover in h.kubectl(
        "get", "crucible", "-o", "name", namespace=PROJECT, check=False
    ).split():
        h.kubectl(
            "patch",
            leftover,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            namespace=PROJECT,
            check=False,
        )
    for namespace in (PROJECT, RELEASE_NS):
        h.delete_namespace(namespace)
    h.wait_for(
        lambda: (
            not h.kubectl(
                "get",
                "namespace",
                PROJECT,
                RELEASE_NS,
                "--ignore-not-found",
                "-o",
                "name",
                check=False,
            ).strip()
        ),
        timeout=180,
        message=f"namespaces {PROJECT} and {RELEASE_NS} to be gone",
    )


class Release(ControlPlane):
    """The release's control plane, reached at its Service's ClusterIP (kube-proxy routes
    it from this machine as from pods), with the admin token the chart generated."""

    def __init__(self) -> None:
        service = h.kubectl_json("get", "service", "crucible-control-plane", namespace=RELEASE_NS)
        secret = h.kubectl_json("get", "secret", "crucible", namespace=RELEASE_NS)
        token = base64.b64decode(secret["data"]["admin-token"]).decode()
        super().__init__(f"http://{service['spec']['clusterIP']}:8080", token)

    def logs(self) -> str:
        tails = []
        for component in ("operator", "worker", "control-plane"):
            out = h.kubectl(
                "logs",
                f"deploy/crucible-{component}",
                "--tail=40",
                namespace=RELEASE_NS,
                check=False,
            )
            tails.append(f"--- {component}\n{out}")
        return "\n".join(tails)


@pytest.fixture(scope="module")
def release(cluster: h.Cluster, host_ip: str) -> Iterator[Release]:
    remove_release()  # a release left by an interrupted session
    (install, _watch) = readme_blocks("On Kubernetes")
    proc = run_block(install, timeout=1800)
    assert proc.returncode == 0, (
        f"README block failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    found = Release()
    try:
        yield found
    finally:
        found.http.close()
        remove_release()


def release_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = h.kubectl_json(
        "get", "pods", "-l", f"{INSTANCE}=crucible", namespace=RELEASE_NS
    )["items"]
    return pods


# The first test sets the module's release up, which pytest-timeout counts: removing a
# left-over release, then the README's block (images built, helm install).
@pytest.mark.timeout(2400)
def test_the_readme_install_runs_every_part_of_the_release_in_restricted_pods(
    release: Release,
) -> None:
    pods = release_pods()
    by_component: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_component.setdefault(
            pod["metadata"]["labels"]["app.kubernetes.io/component"], []
        ).append(pod)
    assert set(by_component) >= {
        "control-plane",
        "operator",
        "worker",
        "beat",
        "postgresql",
        "redis",
        "migrations",
    }, sorted(by_component)
    assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE}
    # The migration ran to completion in its pod; everything else serves.
    assert any(p["status"]["phase"] == "Succeeded" for p in by_component["migrations"])
    for component, found in by_component.items():
        if component == "migrations":
            continue
        for pod in found:
            statuses = pod["status"]["containerStatuses"]
            assert all(s["ready"] for s in statuses), (component, statuses)
    # Admitted by PodSecurity `restricted` (enforced on the namespace), and running as the
    # non-root users the images and the chart declare.
    labels = h.kubectl_json("get", "namespace", RELEASE_NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for pod in pods:
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, pod["metadata"]["name"]

    # Through the Service: ready (database reachable, schema at head), the dashboard served
    # from the image, the API answering the generated admin token and refusing no token.
    assert httpx.get(f"{release.url}/readyz", timeout=10).status_code == 200
    page = httpx.get(f"{release.url}/", timeout=10)
    assert page.status_code == 200 and '<div id="root">' in page.text, page.text[:300]
    assert httpx.get(f"{release.url}/api/v1/projects", timeout=10).status_code == 401
    assert release.get("/projects") is not None


@pytest.mark.slow
@pytest.mark.timeout(1440)  # past its own waits: the runs, the evals, kubectl
def test_the_example_the_readme_applies_trains_across_two_pods_and_each_checkpoint_is_evaluated(
    release: Release, tmp_path: Path
) -> None:
    names = ["multinode-sft-teacher", "multinode-sft"]
    # Every pod's log, kept: when one rank fails, the operator deletes the other pod, and
    # its log (where the first failure often is) goes with it.
    with PodLogRecorder(PROJECT, "crucible.dev/run=multinode-sft", tmp_path) as recorder:
        runs = wait_runs(release, PROJECT, names, seconds=900)
    assert all(runs[n].phase == Phase.Succeeded for n in names), (runs, release.logs())
    run = runs["multinode-sft"]
    pods = h.kubectl_json(
        "get", "pods", "-l", "crucible.dev/run=multinode-sft", "-o", "json", namespace=PROJECT
    )["items"]
    with CrucibleClient(release.url, release.token) as api:
        attempts = [
            (a.number, a.end_reason, a.exit_code, a.message) for a in api.list_attempts(run.id)
        ]
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "multinode-sft-a1-0",
        "multinode-sft-a1-1",
    ], "\n".join([*map(str, attempts), recorder.tails(), release.logs()])
    assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE}
    # Rank 1 found rank 0 by its DNS name (the headless Service), as torchrun's MASTER_ADDR.
    follower = next(p for p in pods if p["metadata"]["name"].endswith("-1"))
    env = {e["name"]: e.get("value") for e in follower["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == f"multinode-sft-a1-0.multinode-sft.{PROJECT}.svc"
    assert sorted(losses(release, run.id)) == list(range(1, 61))
    with CrucibleClient(release.url, release.token) as api:
        checkpoints = api.list_checkpoints(run.id).items
        assert sorted(c.step for c in checkpoints) == [30, 60]
        # Where the values file's storage.uri says, under the run's id.
        assert all(
            c.uri.startswith(f"s3://crucible/chart/runs/{run.id}/checkpoints/") for c in checkpoints
        ), checkpoints
        # The release's workers created an EvalJob per checkpoint, and those ran.
        evals = release.wait_for(
            "an eval of each checkpoint",
            lambda: (found := api.list_run_evals(run.id)) and len(found) == 2 and found,
            seconds=300,
        )
    assert sorted(e.step for e in evals) == [30, 60]

    # The README's second block, as written, once there is something to show.
    (_install, watch) = readme_blocks("On Kubernetes")
    proc = run_block(watch, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "multinode-sft" in proc.stdout


# After the example's run (the test above): its best checkpoint, as the served-model example
# names it, through the release's operator (its RBAC for Deployments) and the S3 storage.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_served_model_example_answers_through_its_service_with_the_projects_token(
    release: Release,
) -> None:
    example = REPO_ROOT / "examples" / "kubernetes" / "served-model.yaml"
    h.kubectl("apply", "-f", str(example), namespace=PROJECT)

    def ready() -> dict[str, Any] | None:
        found = h.kubectl_json("get", "servedmodel", "arith-chat", namespace=PROJECT)
        status: dict[str, Any] = found.get("status") or {}
        return status if status.get("phase") == "Ready" and status.get("checkpoint") else None

    status = release.wait_for("the served model to be Ready", ready, seconds=600)
    assert status["checkpoint"]["run"] == "multinode-sft"
    assert status["readyReplicas"] == 2
    service = h.kubectl_json("get", "service", "arith-chat", namespace=PROJECT)
    base = f"http://{service['spec']['clusterIP']}:8000/v1"
    headers = {"Authorization": f"Bearer {release.token}"}
    models = httpx.get(f"{base}/models", headers=headers, timeout=30)
    assert models.status_code == 200, models.text
    (card,) = models.json()["data"]
    assert (card["id"], card["root"]) == ("arith-chat", f"checkpoint-{status['checkpoint']['id']}")
    answer = httpx.post(
        f"{base}/completions",
        json={"model": "arith-chat", "prompt": "3+4=", "max_tokens": 3, "temperature": 0},
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert httpx.get(f"{base}/models", timeout=30).status_code == 401
    with CrucibleClient(release.url, release.token) as api:
        (deployment,) = api.list_deployments(project=PROJECT).items
    assert deployment.serving_checkpoint_id == status["checkpoint"]["id"]
    h.kubectl("delete", "-f", str(example), "--timeout=120s", namespace=PROJECT)


# Past its own waits (a step to evict at, the run) and, as the last test, the release's
# removal.
@pytest.mark.slow
@pytest.mark.timeout(1560)
def test_an_evicted_pod_resumes_from_its_s3_checkpoint_through_the_releases_workers(
    release: Release,
) -> None:
    producer = teacher(PROJECT, "ev")
    evicted = sft_run(PROJECT, "evicted", "ev-teacher", checkpoints={"everySteps": 200})
    evicted["spec"]["config"]["train"]["steps"] = 400
    h.apply(producer, evicted)

    first = wait_running_past(release, PROJECT, "evicted", 60)
    h.evict_pod(PROJECT, "evicted-a1-0")  # the Eviction API, as `kubectl drain` uses

    runs = wait_runs(release, PROJECT, ["evicted"], seconds=600)
    assert runs["evicted"].phase == Phase.Succeeded, (runs["evicted"], release.logs())
    attempts = release.get(f"/runs/{first['id']}/attempts")
    assert [a["end_reason"] for a in attempts] == ["Evicted", "Completed"], attempts
    checkpoint = release.get(f"/checkpoints/{attempts[1]['resumed_from_checkpoint_id']}")
    # The SIGTERM save of attempt 1 (not the step-200 one), on S3 under the run's id.
    assert checkpoint["uri"].startswith(f"s3://crucible/chart/runs/{first['id']}/checkpoints/")
    assert checkpoint["uri"].endswith(".a1") and 60 <= checkpoint["step"] < 400, checkpoint
    assert checkpoint["step"] != 200, checkpoint
    assert sorted(losses(release, first["id"])) == list(range(1, 401))
