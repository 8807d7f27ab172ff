"""Datasets, run inputs, checkpoints and eval results: idempotency, conflicts, lookups, access.

The helpers at the top are shared with test_lineage.py and test_outbox.py.
"""

import hashlib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.db.tables import Checkpoint
from tests.checkpoint_files import checkpoint_files
from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token, postgres_only

API = "/api/v1"


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def submit_kind(
    admin: TestClient, kind: str, name: str, project: str = "vision", **spec: Any
) -> dict[str, Any]:
    """Submit a run of any kind: TrainingRun, RolloutJob or EvalJob."""
    defaults: dict[str, dict[str, Any]] = {
        "TrainingRun": {},
        "RolloutJob": {"policy": {"teacher": "arithmetic-solver"}, "output": "prompts"},
        "EvalJob": {"checkpoint": {"run": "sft-1"}, "suite": "gsm8k"},
    }
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"experiment": "exp", **defaults[kind], **spec},
    }
    response = admin.post(f"{API}/runs", json={"project": project, "manifest": manifest})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def submit_train(admin: TestClient, project: str = "vision", name: str = "sft-1") -> dict[str, Any]:
    return submit_kind(admin, "TrainingRun", name, project=project)


def register_dataset(
    client: TestClient,
    name: str = "prompts",
    content: str = "v1",
    project: str = "vision",
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "project": project,
        "name": name,
        "uri": f"{SHARED_BUCKET}/data/{name}/{content}",
        "digest": digest(content),
        **extra,
    }
    response = client.post(f"{API}/datasets/versions", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def register_checkpoint(
    client: TestClient, run_id: int, step: int, content: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Register a checkpoint whose files exist (recovery checks them before it resumes)."""
    body = {"step": step, **checkpoint_files(run_id, step, content or f"{run_id}/{step}"), **extra}
    response = client.post(f"{API}/runs/{run_id}/checkpoints", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def record_eval(
    client: TestClient,
    checkpoint_id: int,
    scores: dict[str, float],
    suite: str = "gsm8k",
    eval_run_id: int | None = None,
) -> dict[str, Any]:
    body = {
        "checkpoint_id": checkpoint_id,
        "suite": suite,
        "scores": scores,
        "eval_run_id": eval_run_id,
    }
    response = client.post(f"{API}/evals", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def link_input(client: TestClient, run_id: int, **body: int) -> dict[str, Any]:
    response = client.post(f"{API}/runs/{run_id}/inputs", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def error_text(response: Any) -> str:
    return str(response.json()["detail"])


# --- datasets -------------------------------------------------------------------------------


def test_versions_number_per_dataset_and_same_digest_is_idempotent(admin: TestClient) -> None:
    make_project(admin)
    v1 = register_dataset(admin, content="a", record_count=10, schema={"prompt": "str"})
    assert (v1["version"], v1["ref"], v1["name"]) == (1, "prompts@1", "prompts")
    assert v1["schema"] == {"prompt": "str"} and v1["record_count"] == 10
    again = register_dataset(admin, content="a")
    assert again["id"] == v1["id"] and again["version"] == 1
    v2 = register_dataset(admin, content="b")
    assert v2["version"] == 2
    other = register_dataset(admin, name="answers", content="a")
    assert other["version"] == 1 and other["dataset_id"] != v1["dataset_id"]

    listed = admin.get(f"{API}/datasets", params={"project": "vision"}).json()["items"]
    assert [(d["name"], d["latest_version"]) for d in listed] == [("answers", 1), ("prompts", 2)]
    versions = admin.get(f"{API}/datasets/{v1['dataset_id']}/versions").json()["items"]
    assert [v["version"] for v in versions] == [2, 1]
    fetched = admin.get(f"{API}/datasets/versions/{v2['id']}").json()
    assert fetched["ref"] == "prompts@2" and fetched["digest"] == digest("b")


@postgres_only
def test_concurrent_registrations_number_versions_without_gaps(admin: TestClient) -> None:
    make_project(admin)

    def register(n: int) -> Any:
        body = {
            "project": "vision",
            "name": "racy",
            "uri": f"{SHARED_BUCKET}/racy/{n % 4}",
            "digest": digest(f"racy-{n % 4}"),
        }
        return admin.post(f"{API}/datasets/versions", json=body)

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(register, range(16)))
    assert [r.status_code for r in responses] == [201] * 16
    by_digest: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for response in responses:
        body = response.json()
        by_digest[body["digest"]].add((body["id"], body["version"]))
    assert all(len(found) == 1 for found in by_digest.values())
    assert sorted(v for found in by_digest.values() for _, v in found) == [1, 2, 3, 4]


def test_list_versions_paginates_oldest_first(admin: TestClient) -> None:
    make_project(admin)
    for i in range(5):
        dataset_id = register_dataset(admin, content=str(i))["dataset_id"]
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, "descending": False}
        if cursor:
            params["cursor"] = cursor
        page = admin.get(f"{API}/datasets/{dataset_id}/versions", params=params).json()
        seen += [v["version"] for v in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [1, 2, 3, 4, 5]


def test_resolve_pinned_and_latest_and_refuses_bad_refs(admin: TestClient) -> None:
    make_project(admin)
    register_dataset(admin, content="a")
    v2 = register_dataset(admin, content="b")

    def resolve(ref: str) -> Any:
        return admin.get(f"{API}/datasets/resolve", params={"project": "vision", "ref": ref})

    assert resolve("prompts@1").json()["version"] == 1
    assert resolve("prompts@latest").json()["id"] == v2["id"]
    missing = resolve("prompts@9")
    assert missing.status_code == 404 and "prompts@9" in error_text(missing)
    assert resolve("nothing@latest").status_code == 404
    for bad in ("prompts", "prompts@v1", "@3", "prompts@"):
        response = resolve(bad)
        assert response.status_code == 422, bad
        assert repr(bad) in error_text(response)


def test_dataset_body_is_validated(admin: TestClient) -> None:
    make_project(admin)
    good = {
        "project": "vision",
        "name": "prompts",
        "uri": f"{SHARED_BUCKET}/x",
        "digest": digest("x"),
    }
    for field, value in [
        ("digest", "md5-abc"),
        ("digest", "sha256:XYZ"),
        ("record_count", -1),
        ("name", "a@b"),
        ("surprise", 1),
    ]:
        response = admin.post(f"{API}/datasets/versions", json={**good, field: value})
        assert response.status_code == 422, (field, value)
    missing_project = admin.post(f"{API}/datasets/versions", json={**good, "project": "nope"})
    assert missing_project.status_code == 404


def test_produced_by_must_be_a_run_of_the_same_project(admin: TestClient) -> None:
    make_project(admin)
    make_project(admin, "audio")
    foreign = submit_train(admin, project="audio", name="gen")
    response = admin.post(
        f"{API}/datasets/versions",
        json={
            "project": "vision",
            "name": "prompts",
            "uri": f"{SHARED_BUCKET}/x",
            "digest": digest("x"),
            "produced_by_run_id": foreign["id"],
        },
    )
    assert response.status_code == 404
    producer = submit_kind(admin, "RolloutJob", "gen")
    version = register_dataset(admin, produced_by_run_id=producer["id"])
    assert version["produced_by_run_id"] == producer["id"]
    events = admin.get(f"{API}/runs/{producer['id']}/events").json()
    assert events[-1]["type"] == "DatasetVersionRegistered"
    assert events[-1]["data"]["dataset_version_id"] == version["id"]


# --- run inputs -----------------------------------------------------------------------------


def test_link_inputs_is_idempotent_and_labelled(admin: TestClient) -> None:
    make_project(admin)
    version = register_dataset(admin)
    base = submit_train(admin, name="base")
    checkpoint = register_checkpoint(admin, base["id"], 100)
    run = submit_train(admin)
    first = link_input(admin, run["id"], dataset_version_id=version["id"])
    again = link_input(admin, run["id"], dataset_version_id=version["id"])
    assert first["id"] == again["id"] and first["label"] == "prompts@1"
    init = link_input(admin, run["id"], checkpoint_id=checkpoint["id"])
    assert init["label"] == "base step 100"
    inputs = admin.get(f"{API}/runs/{run['id']}/inputs").json()
    assert [(i["dataset_version_id"], i["checkpoint_id"]) for i in inputs] == [
        (version["id"], None),
        (None, checkpoint["id"]),
    ]


def test_link_input_refusals(admin: TestClient) -> None:
    make_project(admin)
    make_project(admin, "audio")
    run = submit_train(admin)
    own = register_checkpoint(admin, run["id"], 10)
    foreign = register_dataset(admin, project="audio")
    url = f"{API}/runs/{run['id']}/inputs"
    assert admin.post(url, json={}).status_code == 422
    assert admin.post(url, json={"dataset_version_id": 1, "checkpoint_id": 1}).status_code == 422
    assert admin.post(url, json={"dataset_version_id": foreign["id"]}).status_code == 404
    assert admin.post(url, json={"dataset_version_id": 999}).status_code == 404
    self_init = admin.post(url, json={"checkpoint_id": own["id"]})
    assert self_init.status_code == 422 and "attempt" in error_text(self_init)


# --- checkpoints ----------------------------------------------------------------------------


def test_checkpoint_registration_is_idempotent_and_conflicts_on_other_digest(
    admin: TestClient,
) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    first = register_checkpoint(admin, run_id, 100, content="a")
    again = register_checkpoint(admin, run_id, 100, content="a")
    assert again["id"] == first["id"]
    clash = admin.post(
        f"{API}/runs/{run_id}/checkpoints",
        json={"step": 100, "uri": "s3://elsewhere", "digest": digest("b"), "size_bytes": 1},
    )
    assert clash.status_code == 409
    assert first["digest"] in error_text(clash) and digest("b") in error_text(clash)
    events = admin.get(f"{API}/runs/{run_id}/events").json()
    assert [e["type"] for e in events].count("CheckpointRegistered") == 1


def test_checkpoint_attempt_and_latest_step(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    attempt = admin.post(f"{API}/runs/{run_id}/attempts", json={}).json()
    checkpoint = register_checkpoint(admin, run_id, 200, attempt=1)
    assert checkpoint["attempt_id"] == attempt["id"]
    missing = admin.post(
        f"{API}/runs/{run_id}/checkpoints",
        json={"step": 300, "uri": "s3://x", "digest": digest("x"), "size_bytes": 1, "attempt": 7},
    )
    assert missing.status_code == 404 and f"{run_id}/7" in error_text(missing)
    register_checkpoint(admin, run_id, 100)
    assert admin.get(f"{API}/runs/{run_id}").json()["latest_step"] == 200
    latest = admin.get(f"{API}/runs/{run_id}/checkpoints/latest").json()
    assert latest["step"] == 200
    assert admin.get(f"{API}/checkpoints/{checkpoint['id']}").json()["step"] == 200
    empty = submit_train(admin, name="empty")["id"]
    assert admin.get(f"{API}/runs/{empty}/checkpoints/latest").status_code == 404
    assert admin.get(f"{API}/checkpoints/999").status_code == 404


def test_checkpoint_body_is_validated(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    good = {"step": 1, "uri": "s3://x", "digest": digest("x"), "size_bytes": 1}
    for field, value in [("step", -1), ("size_bytes", -5), ("digest", "abc"), ("attempt", 0)]:
        response = admin.post(f"{API}/runs/{run_id}/checkpoints", json={**good, field: value})
        assert response.status_code == 422, (field, value)


def test_list_checkpoints_paginates_by_step(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    for step in (300, 100, 500, 200, 400):
        register_checkpoint(admin, run_id, step)
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = admin.get(f"{API}/runs/{run_id}/checkpoints", params=params).json()
        seen += [c["step"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [100, 200, 300, 400, 500]
    newest = admin.get(
        f"{API}/runs/{run_id}/checkpoints", params={"descending": True, "limit": 1}
    ).json()
    assert newest["items"][0]["step"] == 500


def test_best_checkpoint_by_metric(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    ids = {step: register_checkpoint(admin, run_id, step)["id"] for step in (100, 200, 300, 400)}
    record_eval(admin, ids[100], {"accuracy": 0.5, "loss": 2.0})
    record_eval(admin, ids[200], {"accuracy": 0.9, "loss": 1.5})
    record_eval(admin, ids[300], {"accuracy": 0.7, "loss": 0.5})
    record_eval(admin, ids[400], {"pass@1": 0.9}, suite="humaneval")
    url = f"{API}/runs/{run_id}/checkpoints/best"

    best = admin.get(url, params={"metric": "accuracy"}).json()
    assert (best["step"], best["value"], best["metric"]) == (200, 0.9, "accuracy")
    assert admin.get(url, params={"metric": "loss", "mode": "min"}).json()["step"] == 300
    assert admin.get(url, params={"metric": "pass@1"}).json()["step"] == 400
    none = admin.get(url, params={"metric": "bleu"})
    assert none.status_code == 404 and "bleu" in error_text(none)
    assert admin.get(url, params={"metric": "accuracy", "mode": "median"}).status_code == 422

    record_eval(admin, ids[400], {"accuracy": 0.9})  # a tie goes to the later step
    assert admin.get(url, params={"metric": "accuracy"}).json()["step"] == 400
    with app.state.session_factory.begin() as session:  # retention deleted it
        session.get_one(Checkpoint, ids[400]).deleted_at = datetime.now(UTC)
    assert admin.get(url, params={"metric": "accuracy"}).json()["step"] == 200


# --- evals ----------------------------------------------------------------------------------


def test_eval_results_are_idempotent_and_conflict_on_other_scores(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    checkpoint_id = register_checkpoint(admin, run_id, 100)["id"]
    eval_run = submit_kind(admin, "EvalJob", "eval-1")
    first = record_eval(admin, checkpoint_id, {"accuracy": 0.5}, eval_run_id=eval_run["id"])
    again = record_eval(admin, checkpoint_id, {"accuracy": 0.5}, eval_run_id=eval_run["id"])
    assert again["id"] == first["id"]
    clash = admin.post(
        f"{API}/evals",
        json={
            "checkpoint_id": checkpoint_id,
            "suite": "gsm8k",
            "scores": {"accuracy": 0.6},
            "eval_run_id": eval_run["id"],
        },
    )
    assert clash.status_code == 409 and "gsm8k" in error_text(clash)
    manual = record_eval(admin, checkpoint_id, {"accuracy": 0.55})
    assert record_eval(admin, checkpoint_id, {"accuracy": 0.55})["id"] == manual["id"]
    assert manual["id"] != first["id"]
    inputs = admin.get(f"{API}/runs/{eval_run['id']}/inputs").json()
    assert [i["checkpoint_id"] for i in inputs] == [checkpoint_id]


def test_eval_refusals(admin: TestClient) -> None:
    make_project(admin)
    make_project(admin, "audio")
    run_id = submit_train(admin)["id"]
    checkpoint_id = register_checkpoint(admin, run_id, 100)["id"]
    foreign_eval = submit_kind(admin, "EvalJob", "eval-x", project="audio")
    body = {"checkpoint_id": checkpoint_id, "suite": "gsm8k", "scores": {"accuracy": 0.5}}
    not_eval = admin.post(f"{API}/evals", json={**body, "eval_run_id": run_id})
    assert not_eval.status_code == 422 and "train" in error_text(not_eval)
    assert (
        admin.post(f"{API}/evals", json={**body, "eval_run_id": foreign_eval["id"]}).status_code
        == 404
    )
    assert admin.post(f"{API}/evals", json={**body, "checkpoint_id": 999}).status_code == 404
    assert admin.post(f"{API}/evals", json={**body, "scores": {}}).status_code == 422
    assert admin.post(f"{API}/evals", json={**body, "scores": {'a"b': 1.0}}).status_code == 422


def test_non_finite_scores_are_refused(admin: TestClient) -> None:
    make_project(admin)
    checkpoint_id = register_checkpoint(admin, submit_train(admin)["id"], 100)["id"]
    for value in ("NaN", "Infinity", "1e999"):
        response = admin.post(
            f"{API}/evals",
            headers={"Content-Type": "application/json"},
            content=f'{{"checkpoint_id": {checkpoint_id}, "suite": "s", '
            f'"scores": {{"accuracy": {value}}}}}',
        )
        assert response.status_code == 422, value


def test_list_evals_per_checkpoint_and_run(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    late = register_checkpoint(admin, run_id, 200)["id"]
    early = register_checkpoint(admin, run_id, 100)["id"]
    record_eval(admin, late, {"accuracy": 0.8})
    record_eval(admin, early, {"accuracy": 0.6}, suite="mmlu")
    record_eval(admin, early, {"accuracy": 0.4})
    per_run = admin.get(f"{API}/runs/{run_id}/evals").json()
    assert [(e["step"], e["suite"], e["scores"]["accuracy"]) for e in per_run] == [
        (100, "gsm8k", 0.4),
        (100, "mmlu", 0.6),
        (200, "gsm8k", 0.8),
    ]
    assert all(e["run_id"] == run_id for e in per_run)
    per_checkpoint = admin.get(f"{API}/checkpoints/{early}/evals").json()
    assert [e["suite"] for e in per_checkpoint] == ["gsm8k", "mmlu"]


# --- access ---------------------------------------------------------------------------------


@pytest.fixture
def two_projects(admin: TestClient) -> dict[str, Any]:
    """Project `vision` and `audio`, each with a run, checkpoint, eval and dataset version."""
    world: dict[str, Any] = {}
    for project in ("vision", "audio"):
        make_project(admin, project)
        run = submit_train(admin, project=project)
        checkpoint = register_checkpoint(admin, run["id"], 100)
        world[project] = {
            "run": run["id"],
            "checkpoint": checkpoint["id"],
            "eval": record_eval(admin, checkpoint["id"], {"accuracy": 0.5})["id"],
            "version": register_dataset(admin, project=project),
            "consumer": submit_train(admin, project=project, name="consumer")["id"],
        }
    return world


def _reads(ids: dict[str, Any], project: str) -> list[str]:
    version = ids["version"]
    return [
        f"{API}/datasets?project={project}",
        f"{API}/datasets/{version['dataset_id']}/versions",
        f"{API}/datasets/versions/{version['id']}",
        f"{API}/datasets/resolve?project={project}&ref=prompts@latest",
        f"{API}/runs/{ids['run']}/inputs",
        f"{API}/runs/{ids['run']}/checkpoints",
        f"{API}/runs/{ids['run']}/checkpoints/latest",
        f"{API}/runs/{ids['run']}/checkpoints/best?metric=accuracy",
        f"{API}/checkpoints/{ids['checkpoint']}",
        f"{API}/checkpoints/{ids['checkpoint']}/evals",
        f"{API}/runs/{ids['run']}/evals",
        f"{API}/lineage/run/{ids['run']}",
        f"{API}/lineage/checkpoint/{ids['checkpoint']}",
        f"{API}/lineage/eval_result/{ids['eval']}",
        f"{API}/lineage/dataset_version/{version['id']}",
    ]


def _writes(ids: dict[str, Any], project: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            f"{API}/datasets/versions",
            {
                "project": project,
                "name": "prompts",
                "uri": f"{SHARED_BUCKET}/x",
                "digest": digest(f"w{n}"),
            },
        ),
        (f"{API}/runs/{ids['consumer']}/inputs", {"dataset_version_id": ids["version"]["id"]}),
        (
            f"{API}/runs/{ids['run']}/checkpoints",
            {
                "step": 1000 + n,
                "uri": f"{SHARED_BUCKET}/runs/{ids['run']}/x",
                "digest": digest(f"w{n}"),
                "size_bytes": 1,
            },
        ),
        (
            f"{API}/evals",
            {
                "checkpoint_id": ids["checkpoint"],
                "suite": f"suite-{n}",
                "scores": {"accuracy": 1.0},
            },
        ),
    ]


def test_access_matrix_across_projects(admin: TestClient, two_projects: dict[str, Any]) -> None:
    tokens = {role: make_token(admin, "vision", role) for role in ("viewer", "editor")}
    own, other = two_projects["vision"], two_projects["audio"]
    client = admin  # the same app; headers per request pick the caller

    for url in _reads(own, "vision"):
        assert client.get(url, headers=bearer(tokens["viewer"])).status_code == 200, url
        assert client.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401, url
    for url in _reads(other, "audio"):
        response = client.get(url, headers=bearer(tokens["editor"]))
        assert response.status_code == 404, url

    for n, (url, body) in enumerate(_writes(own, "vision", 1)):
        assert client.post(url, json=body, headers=bearer(tokens["viewer"])).status_code == 403, n
        assert client.post(url, json=body, headers=bearer(tokens["editor"])).status_code == 201, n
    for n, (url, body) in enumerate(_writes(other, "audio", 2)):
        assert client.post(url, json=body, headers=bearer(tokens["editor"])).status_code == 404, n
    # Inputs from another project are hidden even from an editor of the run's project.
    cross = client.post(
        f"{API}/runs/{own['consumer']}/inputs",
        json={"checkpoint_id": other["checkpoint"]},
        headers=bearer(tokens["editor"]),
    )
    assert cross.status_code == 404


def test_the_same_content_at_another_uri_is_a_conflict_naming_both(admin: TestClient) -> None:
    make_project(admin)
    first = register_dataset(admin, content="a")
    moved = admin.post(
        f"{API}/datasets/versions",
        json={
            "project": "vision",
            "name": "prompts",
            "uri": f"{SHARED_BUCKET}/elsewhere/a",
            "digest": digest("a"),
        },
    )
    assert moved.status_code == 409, moved.text
    message = error_text(moved)
    assert first["uri"] in message and f"{SHARED_BUCKET}/elsewhere/a" in message, message
    versions = admin.get(f"{API}/datasets/{first['dataset_id']}/versions").json()["items"]
    assert [(v["version"], v["uri"]) for v in versions] == [(1, first["uri"])]
