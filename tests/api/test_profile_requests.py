"""POST /api/v1/runs/{id}/profile: a profile asked of a running run, carried to its workload
by the heartbeat's answer and reported back in the next heartbeats; refused, saying why,
where no trainer would ever take it up."""

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_project, make_token, training_run


def running(admin: TestClient, manifest: dict[str, Any]) -> int:
    """A run of `manifest` in project vision, Running its first attempt."""
    response = admin.post("/api/v1/runs", json={"project": "vision", "manifest": manifest})
    assert response.status_code == 201, response.text
    run_id: int = response.json()["id"]
    assert admin.post(f"/api/v1/runs/{run_id}/attempts", json={}).status_code == 201
    for phase in ("Scheduling", "Running"):
        moved = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": phase})
        assert moved.status_code == 200, moved.text
    return run_id


@pytest.fixture
def run_id(admin: TestClient) -> int:
    make_project(admin)
    return running(admin, training_run(name="sft"))


def beat(admin: TestClient, run_id: int, **body: Any) -> dict[str, Any]:
    answer = admin.post(f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 1, **body})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_the_request_reaches_the_run_in_its_heartbeat_and_its_progress_comes_back(
    admin: TestClient, run_id: int
) -> None:
    assert beat(admin, run_id)["profile_request"] is None
    created = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3})
    assert created.status_code == 201, created.text
    request = created.json()
    assert (request["run_id"], request["steps"], request["state"]) == (run_id, 3, "pending")
    assert request["first_step"] is None

    offered = beat(admin, run_id)["profile_request"]
    assert (offered["id"], offered["steps"], offered["state"]) == (request["id"], 3, "pending")

    started = {"request_id": request["id"], "state": "started", "first_step": 8, "last_step": 10}
    # Still offered once started: an attempt that ends before the files are written leaves
    # the request to the next one.
    still = beat(admin, run_id, profile=started)["profile_request"]
    assert (still["state"], still["first_step"], still["last_step"]) == ("started", 8, 10)
    listed = admin.get(f"/api/v1/runs/{run_id}/profiles").json()
    assert [(r["id"], r["state"]) for r in listed["requests"]] == [(request["id"], "started")]

    assert beat(admin, run_id, profile=started | {"state": "done"})["profile_request"] is None
    # A report retried after its answer was lost changes nothing.
    assert beat(admin, run_id, profile=started)["profile_request"] is None
    (done,) = admin.get(f"/api/v1/runs/{run_id}/profiles").json()["requests"]
    assert (done["state"], done["first_step"], done["last_step"]) == ("done", 8, 10)

    # Done, the run may be asked again; the newest request is listed first.
    again = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 1})
    assert again.status_code == 201, again.text
    listed = admin.get(f"/api/v1/runs/{run_id}/profiles").json()
    assert [r["id"] for r in listed["requests"]] == [again.json()["id"], request["id"]]


def test_a_second_request_while_one_is_open_is_refused_naming_it(
    admin: TestClient, run_id: int
) -> None:
    first = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3}).json()
    second = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 2})
    assert second.status_code == 409
    assert second.json()["detail"] == (
        f"run {run_id} cannot be profiled now: its profile request {first['id']} is still "
        f"pending (3 steps, not started yet); wait for it (crucible runs profile {run_id} "
        "--wait shows its profile once written)"
    )
    progress = {"request_id": first["id"], "state": "started", "first_step": 4, "last_step": 6}
    beat(admin, run_id, profile=progress)
    third = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 2})
    assert third.status_code == 409 and "still recording steps 4-6" in third.json()["detail"]


@pytest.mark.parametrize("steps", [0, -1, 21, 1000])
def test_steps_out_of_bounds_are_refused_naming_the_value(
    admin: TestClient, run_id: int, steps: int
) -> None:
    refused = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": steps})
    assert refused.status_code == 422
    (error,) = refused.json()["detail"]
    assert error["loc"] == ["body", "steps"]
    assert f"profile 1 to 20 steps, not {steps}" in error["msg"]
    assert admin.get(f"/api/v1/runs/{run_id}/profiles").json()["requests"] == []


def test_a_run_that_is_not_running_is_refused(admin: TestClient) -> None:
    make_project(admin)
    pending = admin.post(
        "/api/v1/runs", json={"project": "vision", "manifest": training_run(name="waits")}
    ).json()
    refused = admin.post(f"/api/v1/runs/{pending['id']}/profile", json={"steps": 3})
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"run {pending['id']} cannot be profiled now: it is Pending, and only a Running run "
        "records steps"
    )
    finished = running(admin, training_run(name="ends"))
    admin.post(f"/api/v1/runs/{finished}/phase", json={"phase": "Succeeded"})
    refused = admin.post(f"/api/v1/runs/{finished}/profile", json={"steps": 3})
    assert refused.status_code == 409 and "it is Succeeded" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        (
            {
                "kind": "EvalJob",
                "metadata": {"name": "evals"},
                "spec": {"experiment": "exp", "checkpoint": {"id": 1}, "suite": "heldout"},
            },
            "EvalJobs run no training steps; only a TrainingRun can be profiled",
        ),
        (
            {
                "kind": "RolloutJob",
                "metadata": {"name": "samples"},
                "spec": {
                    "experiment": "exp",
                    "policy": {"teacher": "arithmetic-solver"},
                    "output": "samples",
                },
            },
            "RolloutJobs run no training steps",
        ),
        (
            training_run(name="own-loop", command=["python", "train.py"]),
            "it runs its own command (spec.command), and only the built-in train job",
        ),
        (
            training_run(name="online", config={"online": {"rounds": 2}}),
            "it is online RL (config.online)",
        ),
    ],
)
def test_a_run_no_trainer_of_ours_runs_is_refused_saying_why(
    admin: TestClient, manifest: dict[str, Any], reason: str
) -> None:
    make_project(admin)
    manifest = {"apiVersion": "crucible.dev/v1alpha1", **manifest}
    run_id = running(admin, manifest)
    refused = admin.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3})
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert detail.startswith(f"run {run_id} cannot be profiled now: {reason}"), detail


def test_asking_takes_an_editor_of_the_runs_project(
    admin: TestClient, app: FastAPI, run_id: int
) -> None:
    viewer = TestClient(app, headers=bearer(make_token(admin, "vision", "viewer")))
    refused = viewer.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3})
    assert refused.status_code == 403 and "needs editor" in refused.json()["detail"]
    make_project(admin, "other")
    outsider = TestClient(app, headers=bearer(make_token(admin, "other", "admin")))
    hidden = outsider.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3})
    assert hidden.status_code == 404 and hidden.json()["detail"] == f"run {run_id!r} not found"
    editor = TestClient(app, headers=bearer(make_token(admin, "vision", "editor")))
    assert editor.post(f"/api/v1/runs/{run_id}/profile", json={"steps": 3}).status_code == 201


def test_progress_of_another_runs_request_is_not_found(admin: TestClient, run_id: int) -> None:
    other = running(admin, training_run(name="other"))
    request = admin.post(f"/api/v1/runs/{other}/profile", json={"steps": 2}).json()
    progress = {"request_id": request["id"], "state": "done", "first_step": 1, "last_step": 2}
    refused = admin.post(
        f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 1, "profile": progress}
    )
    assert refused.status_code == 404
    assert refused.json()["detail"] == f"profile request {request['id']!r} not found"
    (untouched,) = admin.get(f"/api/v1/runs/{other}/profiles").json()["requests"]
    assert untouched["state"] == "pending"
