"""The Sweep as the control plane keeps it: submitted through the API (checked whole), its
trials started as runs by the workers' tick, the one ASHA judges cancelled with the reason,
the best picked at the end; the tick's state kept on the sweep, so a tick after a restart
decides as the one before. The trials' runs are moved and fed metrics through the API, as a
workload would."""

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.db.engine import build_session_factory
from crucible.domain.specs import SweepManifest
from crucible.sweeps.plan import parse_plan
from crucible.sweeps.tpe import tpe_point
from crucible.workers.sweeps import advance_sweeps
from tests.conftest import bearer, make_project, make_token

BASE_RUN = {"experiment": "lr", "config": {"model": {"preset": "tiny"}, "train": {"steps": 100}}}


def sweep(name: str = "lr-grid", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": {
            "method": "grid",
            "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"trials": 3, "concurrency": 2},
            "earlyStopping": {"minSteps": 10, "maxSteps": 100, "reductionFactor": 2},
            "parameters": {"config.train.lr": {"values": [0.01, 0.0001, 0.001]}},
            "run": BASE_RUN,
            **spec,
        },
    }


def tick(app: FastAPI) -> None:
    advance_sweeps(build_session_factory(app.state.engine))


def submit(admin: TestClient, manifest: dict[str, Any]) -> dict[str, Any]:
    response = admin.post("/api/v1/sweeps", json={"project": "vision", "manifest": manifest})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def get(admin: TestClient, sweep_id: int) -> dict[str, Any]:
    response = admin.get(f"/api/v1/sweeps/{sweep_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def train(admin: TestClient, run_id: int, losses: dict[int, float], *, end: bool) -> None:
    for phase in ("Scheduling", "Running"):
        admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": phase})
    points = [{"key": "loss", "step": s, "value": v} for s, v in losses.items()]
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"points": points})
    assert response.status_code == 200, response.text
    if end:
        done = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": "Succeeded"})
        assert done.status_code == 200, done.text


def test_a_sweep_starts_its_trials_stops_the_worse_and_ends_with_the_best(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    created = submit(admin, sweep())
    assert created["phase"] == "Running" and created["trials"] == []
    assert (created["metric"], created["goal"], created["budget"]) == ("loss", "minimize", 3)
    assert submit(admin, sweep())["id"] == created["id"]  # the same again: the same sweep

    tick(app)
    trials = get(admin, created["id"])["trials"]
    assert [(t["number"], t["run_name"], t["phase"]) for t in trials] == [
        (0, "lr-grid-000", "Pending"),
        (1, "lr-grid-001", "Pending"),
    ]  # two at once, as the budget's concurrency says
    run = admin.get(f"/api/v1/runs/{trials[1]['run_id']}").json()
    assert run["manifest"]["spec"]["config"]["train"] == {"steps": 100, "lr": 0.0001}
    assert run["tags"] == {
        "sweep": "lr-grid",
        "sweep.trial": "1",
        "sweep.config.train.lr": "0.0001",
    }

    train(admin, trials[0]["run_id"], {10: 2.0, 20: 1.5}, end=False)
    tick(app)
    train(admin, trials[1]["run_id"], {10: 3.0}, end=False)
    tick(app)
    shown = get(admin, created["id"])
    stopped = shown["trials"][1]
    assert stopped["phase"] == "Cancelled"
    assert stopped["stopped_reason"] == (
        "stopped by ASHA at step 10 (rung 10): loss 3 is not among the best 1 of 2 trials "
        "there (cutoff 2, minimize)"
    )
    events = admin.get(f"/api/v1/runs/{stopped['run_id']}/events").json()
    assert events[-1]["reason"] == "StoppedBySweep"
    assert [t["number"] for t in shown["trials"]] == [0, 1, 2]  # its place went to trial 2

    train(admin, shown["trials"][2]["run_id"], {10: 1.0, 100: 0.5}, end=True)
    train(admin, trials[0]["run_id"], {100: 0.7}, end=True)
    tick(app)
    ended = get(admin, created["id"])
    assert ended["phase"] == "Succeeded"
    assert ended["best_trial"] == 2
    assert ended["message"] == (f"best: trial 2 (run {ended['trials'][2]['run_id']}), loss 0.5")
    assert [(t["value"], t["step"]) for t in ended["trials"]] == [(0.7, 100), (3.0, 10), (0.5, 100)]
    tick(app)  # an ended sweep starts nothing more
    assert len(get(admin, created["id"])["trials"]) == 3
    listed = admin.get("/api/v1/sweeps", params={"project": "vision"}).json()["items"]
    assert [(s["name"], s["trials"]) for s in listed] == [("lr-grid", [])]


def test_cancelling_a_sweep_cancels_its_running_trials(app: FastAPI, admin: TestClient) -> None:
    make_project(admin)
    created = submit(admin, sweep())
    tick(app)
    cancelled = admin.post(f"/api/v1/sweeps/{created['id']}/cancel").json()
    assert cancelled["phase"] == "Cancelled" and cancelled["finished_at"] is not None
    assert [t["phase"] for t in cancelled["trials"]] == ["Cancelled", "Cancelled"]
    tick(app)
    assert len(get(admin, created["id"])["trials"]) == 2


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            {"parameters": {"config.train.lrate": {"values": [0.1]}}},
            "parameter 'config.train.lrate': config.train has no key 'lrate'",
        ),
        (
            {"parameters": {"config.train.lr": {"values": [0.1, 0.2, "fast"]}}},
            "config.train.lr='fast' makes a bad run config",
        ),
        ({"budget": {"trials": 5}}, "budget.trials=5 is more than the grid's 3 points"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_path_and_nothing_is_kept(
    admin: TestClient, change: dict[str, Any], named: str
) -> None:
    make_project(admin)
    response = admin.post("/api/v1/sweeps", json={"project": "vision", "manifest": sweep(**change)})
    assert response.status_code == 422, response.text
    assert named in response.text
    assert admin.get("/api/v1/sweeps").json()["items"] == []


def test_a_sweep_name_leaves_room_for_the_trial_numbers(admin: TestClient) -> None:
    make_project(admin)
    response = admin.post(
        "/api/v1/sweeps", json={"project": "vision", "manifest": sweep(name="a" * 37)}
    )
    assert response.status_code == 422
    assert "a sweep's name is at most 36 characters" in response.text


def test_another_projects_sweep_is_not_found_and_a_viewer_cannot_cancel(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    make_project(admin, "speech")
    created = submit(admin, sweep())
    outsider = TestClient(app, headers=bearer(make_token(admin, "speech", "admin")))
    assert outsider.get(f"/api/v1/sweeps/{created['id']}").status_code == 404
    assert outsider.get("/api/v1/sweeps").json()["items"] == []
    viewer = TestClient(app, headers=bearer(make_token(admin, "vision", "viewer")))
    assert viewer.get(f"/api/v1/sweeps/{created['id']}").status_code == 200
    refused = viewer.post(f"/api/v1/sweeps/{created['id']}/cancel")
    assert refused.status_code == 403
    assert "cannot do this; it needs editor" in refused.text


def test_a_tpe_trial_is_drawn_from_the_trials_finished_when_it_starts_and_kept(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    ranged = {"config.train.lr": {"min": 1.0e-5, "max": 1.0e-1, "log": True}}
    created = submit(
        admin,
        sweep(
            method="tpe",
            budget={"trials": 3, "concurrency": 1},
            earlyStopping=None,
            parameters=ranged,
        ),
    )
    for number, loss in ((0, 2.0), (1, 1.0)):
        tick(app)
        trial = get(admin, created["id"])["trials"][number]
        train(admin, trial["run_id"], {100: loss}, end=True)
    tick(app)
    trials = get(admin, created["id"])["trials"]
    finished = [(t["point"], t["value"]) for t in trials[:2]]
    plan = parse_plan(SweepManifest.model_validate(created["manifest"]).spec.plan_settings())
    assert trials[2]["point"] == tpe_point(plan.space, 0, 2, finished, goal="minimize")
    run = admin.get(f"/api/v1/runs/{trials[2]['run_id']}").json()
    assert run["manifest"]["spec"]["config"]["train"]["lr"] == trials[2]["point"]["config.train.lr"]
