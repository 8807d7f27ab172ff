"""What the dashboard's submit page asks before it submits: a manifest checked as
`POST /runs` or `POST /sweeps` would check it, with nothing written; and the submission that
reproduces a run, as `crucible runs reproduce` builds it, or the 409 saying why not."""

import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from crucible import provenance
from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token, training_run
from tests.route_examples import sweep

API = "/api/v1"


def check(client: TestClient, manifest: Any, project: str = "vision") -> Any:
    return client.post(f"{API}/manifests/validate", json={"project": project, "manifest": manifest})


def problems(client: TestClient, manifest: Any) -> dict[str, str]:
    answer = check(client, manifest)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["valid"] is (not body["errors"])
    return {error["path"]: error["message"] for error in body["errors"]}


def test_a_valid_manifest_of_each_kind_has_no_problems(admin: TestClient) -> None:
    make_project(admin)
    rollout = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "roll"},
        "spec": {
            "experiment": "e",
            "prompts": {"dataset": "p@latest"},
            "policy": {"checkpoint": {"id": 1}},
            "output": "samples",
        },
    }
    evaluation = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "EvalJob",
        "metadata": {"name": "ev"},
        "spec": {"experiment": "e", "checkpoint": {"run": "sft-1"}, "suite": "heldout"},
    }
    for manifest in (
        training_run(config={"train": {"lr": 0.001}}),
        rollout,
        evaluation,
        sweep("lr"),
    ):
        answer = check(admin, manifest)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"valid": True, "errors": []}, manifest["kind"]
    # Checked, not submitted.
    assert admin.get(f"{API}/runs", params={"project": "vision"}).json()["items"] == []
    assert admin.get(f"{API}/sweeps", params={"project": "vision"}).json()["items"] == []


def test_each_problem_is_named_at_its_path(admin: TestClient) -> None:
    make_project(admin)
    manifest = training_run(
        name="Bad_Name", gpusPerNode=-1, inputs=[{"dataset": "sums@1"}, {"dataset": "nope"}]
    )
    del manifest["spec"]["experiment"]  # type: ignore[attr-defined]
    manifest["spec"]["colour"] = "blue"  # type: ignore[index]
    found = problems(admin, manifest)
    assert set(found) == {
        "metadata.name",
        "spec.experiment",
        "spec.gpusPerNode",
        "spec.inputs.1.dataset",
        "spec.colour",
    }
    assert found["spec.experiment"] == "Field required"
    assert "greater than or equal to 0" in found["spec.gpusPerNode"]
    assert "Extra inputs are not permitted" in found["spec.colour"]
    # What submitting it answers names the same problems.
    refused = admin.post(f"{API}/runs", json={"project": "vision", "manifest": manifest})
    assert refused.status_code == 422
    assert len(refused.json()["detail"]) == len(found)


def test_a_sweep_is_checked_as_its_submission_checks_every_trial(admin: TestClient) -> None:
    make_project(admin)
    bad_value = sweep("lr")
    bad_value["spec"]["parameters"] = {"config.train.lr": {"values": [0.01, "fast"]}}
    bad_value["spec"]["budget"] = {"trials": 2}  # the second trial's config is the bad one
    found = problems(admin, bad_value)
    assert list(found) == ["spec"]
    assert "config.train.lr must be a number" in found["spec"], found
    refused = admin.post(f"{API}/sweeps", json={"project": "vision", "manifest": bad_value})
    assert refused.status_code == 422
    assert found["spec"] in refused.json()["detail"][0]["msg"]

    long_name = sweep("a" * 38)
    assert "at most 36 characters" in problems(admin, long_name)["metadata.name"]
    no_budget = sweep("lr")
    no_budget["spec"]["budget"] = {"trials": 0}
    assert list(problems(admin, no_budget)) == ["spec.budget.trials"]


def test_an_unknown_kind_or_a_document_that_is_no_mapping_is_named(admin: TestClient) -> None:
    make_project(admin)
    unknown = problems(admin, {**training_run(), "kind": "ServedModel"})
    assert unknown == {
        "kind": "kind is one of TrainingRun, RolloutJob, EvalJob, Sweep; got 'ServedModel'"
    }
    assert list(problems(admin, {"metadata": {"name": "x"}})) == ["kind"]
    assert list(problems(admin, ["kind: TrainingRun"])) == [""]
    assert list(problems(admin, None)) == [""]


def test_a_viewer_may_check_a_token_of_another_project_may_not(admin: TestClient, app: Any) -> None:
    make_project(admin)
    make_project(admin, "other")
    viewer = TestClient(app, headers=bearer(make_token(admin, "vision", "viewer")))
    outsider = TestClient(app, headers=bearer(make_token(admin, "other", "admin")))
    assert check(viewer, training_run()).json() == {"valid": True, "errors": []}
    assert check(outsider, training_run()).status_code in (403, 404)
    assert check(admin, training_run(), project="nowhere").status_code == 404


# --- reproduction ------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def finished_local_run(admin: TestClient, repo: Path) -> dict[str, Any]:
    """A local run of the code in `repo` that read `sums@latest` (then version 1) and
    succeeded, its code recorded as `crucible submit` records it."""
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "r@example.invalid")
    git(repo, "config", "user.name", "r")
    (repo / "train.py").write_text("print(42)\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    make_project(admin)
    dataset = {
        "project": "vision",
        "name": "sums",
        "uri": f"{SHARED_BUCKET}/d",
        "digest": "sha256:" + "1" * 64,
    }
    assert admin.post(f"{API}/datasets/versions", json=dataset).status_code == 201
    manifest = training_run(
        name="learn",
        command=[sys.executable, "train.py"],
        workingDir=str(repo),
        inputs=[{"dataset": "sums@latest"}],
    )
    code = provenance.capture(repo).model_dump(mode="json")
    body = {"project": "vision", "manifest": manifest, "code": code, "tags": {"team": "a"}}
    run = admin.post(f"{API}/runs", json=body).json()
    rid = run["id"]
    assert admin.post(f"{API}/runs/{rid}/inputs/resolve").json()["ready"] is True
    for phase in ("Scheduling", "Running"):
        assert admin.post(f"{API}/runs/{rid}/phase", json={"phase": phase}).is_success
        if phase == "Scheduling":
            assert admin.post(f"{API}/runs/{rid}/attempts", json={}).status_code == 201
    assert admin.post(
        f"{API}/runs/{rid}/attempts/1/end", json={"end_reason": "Succeeded", "exit_code": 0}
    ).is_success
    done: dict[str, Any] = admin.post(f"{API}/runs/{rid}/phase", json={"phase": "Succeeded"}).json()
    assert done["phase"] == "Succeeded", done
    return done


def test_a_finished_local_run_reproduces_with_its_inputs_pinned(
    admin: TestClient, tmp_path: Path
) -> None:
    run = finished_local_run(admin, tmp_path / "code")
    # A newer version: `@latest` moves on, the reproduction must not.
    newer = {
        "project": "vision",
        "name": "sums",
        "uri": f"{SHARED_BUCKET}/d2",
        "digest": "sha256:" + "2" * 64,
    }
    assert admin.post(f"{API}/datasets/versions", json=newer).status_code == 201

    answer = admin.get(f"{API}/runs/{run['id']}/reproduction")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["project"] == "vision" and body["backend"] == "local"
    assert body["manifest"]["metadata"]["name"] == "learn-r1"
    assert body["manifest"]["spec"]["inputs"] == [{"dataset": "sums@1"}]
    assert body["manifest"]["spec"]["command"] == run["manifest"]["spec"]["command"]
    assert body["tags"] == {"team": "a", "crucible.dev/reproduces": str(run["id"])}
    assert body["code"]["git"]["commit"] == run["code"]["git"]["commit"]
    assert "k8s_uid" not in body  # nulls left out: the body posts back as it is

    # Posted back as it came, it is the reproduction; the next one is numbered after it.
    again = admin.post(f"{API}/runs", json=body)
    assert again.status_code == 201, again.text
    assert again.json()["name"] == "learn-r1"
    second = admin.get(f"{API}/runs/{run['id']}/reproduction").json()
    assert second["manifest"]["metadata"]["name"] == "learn-r2"


def test_a_run_that_cannot_be_reproduced_answers_409_saying_why(
    admin: TestClient, tmp_path: Path
) -> None:
    run = finished_local_run(admin, tmp_path / "code")
    (tmp_path / "code" / "train.py").write_text("print(41)\n")  # the code changed since
    refused = admin.get(f"{API}/runs/{run['id']}/reproduction")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith(f"run {run['id']}'s code cannot be had here: ")

    pending = admin.post(
        f"{API}/runs", json={"project": "vision", "manifest": training_run(name="new")}
    ).json()
    never = admin.get(f"{API}/runs/{pending['id']}/reproduction")
    assert never.status_code == 409
    assert never.json()["detail"] == (
        f"run {pending['id']} never resolved its inputs (it is Pending), so which versions it "
        "read is not known"
    )
    assert admin.get(f"{API}/runs/999999/reproduction").status_code == 404
