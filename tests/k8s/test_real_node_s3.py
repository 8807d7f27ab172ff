"""The real node with object storage instead of a shared volume: the operator runs with
--storage-uri on the test stack's S3 server (scripts/objectstore, listening on the pods'
bridge) and pods take its keys from a Secret. A teacher publishes its dataset to S3, two SFT
runs read it back, one is evicted: its SIGTERM checkpoint goes to S3, the workers check it
there, and the next pod resumes from it with the uninterrupted run's losses, bitwise. A
run's code package (`crucible submit --package --package-to s3://...`) comes from S3 too.

Its own module, so its stack (whose operator watches every namespace) never runs beside
test_real_node's."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crucible.artifacts import code_package, remote
from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack
from tests.k8s.real_node import (
    add_s3_secret,
    enforce_restricted,
    install_crds,
    losses,
    object_storage,
    sft_run,
    stack_on_real_node,
    teacher,
    wait_running_past,
    wait_runs,
)
from tests.object_store import ObjectStore, object_store, point_at

# The control plane beside the node (operator_stack.Stack) runs on the shared Postgres and Redis.
pytestmark = [
    pytest.mark.k8s,
    pytest.mark.realnode,
    pytest.mark.objectstore,
    pytest.mark.postgres,
    pytest.mark.redis,
]


@pytest.fixture(scope="module")
def store(host_ip: str) -> ObjectStore:
    found = object_store()
    assert host_ip in found.endpoint, (
        f"the S3 server listens on {found.endpoint}, which the pods cannot reach; start it "
        "after the cluster (scripts/test does) so it takes the bridge's address"
    )
    return found


@pytest.fixture(scope="module")
def prefix(store: ObjectStore) -> str:
    return store.prefix("realnode")


@pytest.fixture(scope="module")
def s3_stack(
    cluster: h.Cluster,
    host_ip: str,
    workload_image: str,
    store: ObjectStore,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    install_crds()
    # The workers check and retire checkpoints on S3, and the API checks storage at submit:
    # they get the same keys as the pods, from their environment.
    stack = stack_on_real_node(
        tmp_path_factory.mktemp("s3-stack"),
        {**cluster.env(), **store.client_env},
        host_ip=host_ip,
        image=workload_image,
        storage=object_storage(store, prefix),
        suffix="realnode_s3",
    )
    stack.start()
    yield stack
    stack.stop()


@pytest.fixture
def s3_ns(namespace: str, store: ObjectStore, s3_stack: Stack) -> Iterator[str]:
    enforce_restricted(namespace)
    add_s3_secret(namespace, store)
    yield namespace
    h.kubectl("delete", "crucible", "--all", "--wait=false", namespace=namespace, check=False)


# Past its own waits (a step to evict at, the runs) and its stack's start.
@pytest.mark.slow
@pytest.mark.timeout(1260)
def test_an_evicted_attempt_checkpoints_to_s3_and_the_next_pod_resumes_bitwise(
    s3_ns: str,
    s3_stack: Stack,
    store: ObjectStore,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    forget_s3_clients: None,
) -> None:
    producer = teacher(s3_ns, "s3")
    every = {"everySteps": 200, "keepLast": 5}
    evicted = sft_run(s3_ns, "evicted", "s3-teacher", checkpoints=every)
    steady = sft_run(s3_ns, "steady", "s3-teacher", checkpoints=every)
    for run in (evicted, steady):
        run["spec"]["config"]["train"]["steps"] = 400
    h.apply(producer, evicted, steady)

    first = wait_running_past(s3_stack, s3_ns, "evicted", 60)
    h.evict_pod(s3_ns, "evicted-a1-0")

    runs = wait_runs(s3_stack, s3_ns, ["s3-teacher", "evicted", "steady"], seconds=600)
    assert all(r.phase == Phase.Succeeded for r in runs.values()), (runs, s3_stack.logs())
    attempts = s3_stack.get(f"/runs/{first['id']}/attempts")
    assert [a["end_reason"] for a in attempts] == ["Evicted", "Completed"], attempts
    resumed_from = attempts[1]["resumed_from_checkpoint_id"]
    checkpoint = s3_stack.get(f"/checkpoints/{resumed_from}")
    # The SIGTERM save of attempt 1, on S3 under the run's id, named for its attempt.
    assert checkpoint["uri"].startswith(f"{prefix}/runs/{first['id']}/checkpoints/"), checkpoint
    assert checkpoint["uri"].endswith(".a1") and 60 <= checkpoint["step"] < 400, checkpoint
    assert losses(s3_stack, first["id"]) == losses(s3_stack, runs["steady"].id)

    # The teacher's dataset went to S3 and the runs read it from there.
    dataset = s3_stack.get("/datasets/resolve", project=s3_ns, ref="s3-sft-data@latest")
    assert dataset["uri"].startswith(f"{prefix}/runs/{runs['s3-teacher'].id}/outputs/"), dataset
    point_at(store, monkeypatch)
    found = remote.content(dataset["uri"])
    assert found is not None and found.digest == dataset["digest"]

    # The keys reached the pods from the Secret: no pod spec or event carries them.
    pods = h.kubectl_json("get", "pods", "-o", "json", namespace=s3_ns)
    events = h.kubectl_json("get", "events", "-o", "json", namespace=s3_ns)
    for what in (pods, events):
        assert store.secret_key not in json.dumps(what)
    assert all(
        c["envFrom"] == [{"secretRef": {"name": "crucible-s3"}}]
        for p in pods["items"]
        for c in p["spec"]["containers"]
    )


PACKAGED_SCRIPT = """\
import crucible

from shipped_code.answer import ANSWER

run = crucible.init()
run.log({"answer": ANSWER}, step=0)
run.finish()
"""


def packaged_run(name: str, code_package: str | None = None) -> str:
    spec = "  experiment: packages\n  command: [python, -m, shipped_code.train]\n"
    spec += "  recovery: {maxFailures: 0}\n"
    if code_package is not None:
        spec += f"  codePackage: {code_package}\n"
    return f"kind: TrainingRun\nmetadata: {{name: {name}}}\nspec:\n{spec}"


@pytest.mark.timeout(900)
def test_a_code_package_on_s3_runs_in_a_restricted_pod_and_a_changed_one_fails_naming_digests(
    s3_ns: str,
    s3_stack: Stack,
    store: ObjectStore,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    forget_s3_clients: None,
) -> None:
    """docs/storage.md's `crucible submit --package` on a cluster whose only shared storage is
    S3: the init container fetches the package with the pods' keys, the workload imports it."""
    module = tmp_path / "team-code" / "shipped_code"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("")
    (module / "answer.py").write_text("ANSWER = 42.0\n")
    (module / "train.py").write_text(PACKAGED_SCRIPT)
    runs = tmp_path / "runs.yaml"
    runs.write_text(packaged_run("packaged"))
    s3_stack.post("/projects", {"name": s3_ns, "namespace": s3_ns})
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")},
        **store.client_env,
        "CRUCIBLE_API_URL": s3_stack.url,
        "CRUCIBLE_TOKEN": s3_stack.token,
        "CRUCIBLE_HOME": str(tmp_path / "home"),
    }
    submit = [sys.executable, "-m", "crucible", "submit", "--project", s3_ns]
    submit += ["--backend", "kubernetes"]
    done = subprocess.run(
        [*submit, str(runs), "--package", str(module.parent), "--package-to", f"{prefix}/code"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ran = wait_runs(s3_stack, s3_ns, ["packaged"], seconds=400)["packaged"]
    assert ran.phase == Phase.Succeeded, (ran, s3_stack.logs())
    history = s3_stack.get(f"/runs/{ran.id}/metrics", keys="answer")
    assert history["series"][0]["values"] == [42.0]
    (artifact,) = s3_stack.get("/artifacts", project=s3_ns, kind="code")["items"]
    assert artifact["uri"].startswith(f"{prefix}/code/")

    # The object changed behind the control plane's back: the init container refuses it.
    point_at(store, monkeypatch)
    fs, path = remote.filesystem(artifact["uri"])
    changed = fs.cat_file(path).replace(b"ANSWER = 42.0", b"ANSWER = 41.0")
    fs.pipe_file(path, changed)
    runs.write_text(packaged_run("tampered", f"artifact:{artifact['id']}"))
    done = subprocess.run(
        [*submit, str(runs)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    failed = wait_runs(s3_stack, s3_ns, ["tampered"], seconds=400)["tampered"]
    assert failed.phase == Phase.Failed, failed
    (attempt,) = s3_stack.get(f"/runs/{failed.id}/attempts")
    found = code_package.digest_of(changed)
    assert f"expected {artifact['digest']}, found {found}" in attempt["message"], attempt


# Past its own waits: the inputs made and uploaded, then seven runs (three submitted, four
# EvalJobs) through pods, one at a time on the node.
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_hf_loop_runs_on_the_real_node_with_its_inputs_and_code_on_s3(
    s3_ns: str,
    s3_stack: Stack,
    store: ObjectStore,
    prefix: str,
    tmp_path: Path,
    forget_s3_clients: None,
) -> None:
    """examples/hf-loop as its header says for a cluster: the model directory and the Parquet
    file registered on S3 (`--to`), the loop submitted with the team's code as a package on
    S3; the same file that runs on `crucible up` runs in restricted pods whose only shared
    storage is S3, and lineage runs from the exported model back to both inputs."""
    repo = Path(__file__).parents[2]
    s3_stack.post("/projects", {"name": s3_ns, "namespace": s3_ns})
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")},
        **store.client_env,
        "CRUCIBLE_API_URL": s3_stack.url,
        "CRUCIBLE_TOKEN": s3_stack.token,
        "CRUCIBLE_HOME": str(tmp_path / "home"),
    }
    inputs = tmp_path / "hf-inputs"
    # The header's commands with a cluster's flags (`crucible` as `python -m crucible`).
    commands = [
        f"examples/hf-loop/make_inputs.py {inputs}",
        f"-m crucible artifacts register hf-model {inputs}/model --kind model "
        f"--to {prefix}/models --project {s3_ns}",
        f"-m crucible datasets register hf-arith {inputs}/arith.parquet "
        f"--to {prefix}/datasets --project {s3_ns}",
        "-m crucible submit examples/hf-loop/loop.yaml --package examples/team-code "
        f"--backend kubernetes --package-to {prefix}/code --project {s3_ns}",
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable, *shlex.split(command)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-4000:])

    with CrucibleClient(s3_stack.url, s3_stack.token) as api:

        def all_ended() -> list[Any] | None:
            found = api.list_runs(project=s3_ns, limit=100).items
            ended = len(found) >= 7 and all(r.phase.is_terminal for r in found)
            return found if ended else None

        found = s3_stack.wait_for("the loop's 7 runs", all_ended, seconds=1200)
        report = [(r.name, r.phase, r.reason, r.message) for r in found]
        assert all(r.phase == Phase.Succeeded for r in found), (report, s3_stack.logs())
        by_name = {r.name: r for r in found}
        models = {a.name: a for a in api.list_artifacts(s3_ns, kind="model").items}
        assert set(models) == {"hf-model", "hf-sft-step100-hf", "hf-rl-step8-hf"}, models
        assert all(m.uri.startswith(f"{prefix}/") for m in models.values()), models
        (package,) = api.list_artifacts(s3_ns, kind="code").items
        (data,) = [d for d in api.list_datasets(s3_ns).items if d.name == "hf-arith"]
        (version,) = api.list_dataset_versions(data.id).items
        exported = models["hf-rl-step8-hf"]
        upstream = api.lineage("artifact", exported.id, "upstream", depth=10)
        nodes = {(n["type"], n["id"]) for n in upstream["nodes"]}
        assert {
            ("artifact", models["hf-model"].id),
            ("artifact", package.id),
            ("dataset_version", version.id),
            ("run", by_name["hf-sft"].id),
            ("run", by_name["hf-rollouts"].id),
        } <= nodes, nodes
        evals = api.list_run_evals(by_name["hf-rl"].id)
        assert {e.suite for e in evals} == {"team_loop.code:likelihood_suite", "arithmetic"}
