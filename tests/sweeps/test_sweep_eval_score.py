"""A sweep judged by an eval score (`metric.evalSuite`): ASHA sees each trial's checkpoints'
scores at their steps, the sweep waits for the scores that come after a trial's run has
ended, a failed eval waits for nothing, and a sweep whose trials no suite would score is
refused. The trials' runs register checkpoints and their scores through the API, as the
train job and the eval job would."""

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.core.eval_trigger import on_checkpoint_registered
from crucible.db.engine import build_session_factory
from tests.conftest import SHARED_BUCKET, make_project
from tests.sweeps.test_sweep_resource import get, submit, tick

DIGEST = "sha256:" + "0" * 64
SUITE = "arithmetic"


def eval_sweep(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": "lr-by-eval"},
        "spec": {
            "method": "grid",
            "metric": {"name": "eval/accuracy", "goal": "maximize", "evalSuite": SUITE},
            "budget": {"trials": 3, "concurrency": 2},
            "earlyStopping": {"minSteps": 10, "maxSteps": 40, "reductionFactor": 2},
            "parameters": {"config.train.lr": {"values": [0.01, 0.0001, 0.001]}},
            "run": {
                "experiment": "lr",
                "config": {"model": {"preset": "tiny"}, "train": {"steps": 40}},
                "checkpoints": {"everySteps": 10},
                "evals": [{"suite": SUITE}],
            },
            **spec,
        },
    }


def start(admin: TestClient, run_id: int) -> None:
    for phase in ("Scheduling", "Running"):
        assert admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": phase}).is_success


def end(admin: TestClient, run_id: int) -> None:
    assert admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": "Succeeded"}).is_success


def checkpoint(admin: TestClient, run_id: int, step: int) -> int:
    response = admin.post(
        f"/api/v1/runs/{run_id}/checkpoints",
        # In the run's own folder of a storage root: a checkpoint may be nowhere else.
        json={
            "step": step,
            "uri": f"{SHARED_BUCKET}/runs/{run_id}/{step}",
            "digest": DIGEST,
            "size_bytes": 1,
        },
    )
    assert response.status_code == 201, response.text
    checkpoint_id: int = response.json()["id"]
    return checkpoint_id


def score(admin: TestClient, checkpoint_id: int, accuracy: float) -> None:
    response = admin.post(
        "/api/v1/evals",
        json={
            "checkpoint_id": checkpoint_id,
            "suite": SUITE,
            "scores": {"eval/accuracy": accuracy},
        },
    )
    assert response.status_code == 201, response.text


def test_asha_judges_trials_by_their_checkpoints_eval_scores(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    created = submit(admin, eval_sweep())
    tick(app)
    first, second = (t["run_id"] for t in get(admin, created["id"])["trials"])
    start(admin, first)
    start(admin, second)
    # The logged metric of the same name is not what the sweep reads.
    admin.post(
        f"/api/v1/runs/{second}/metrics",
        json={"points": [{"key": "eval/accuracy", "step": 10, "value": 0.99}]},
    )
    score(admin, checkpoint(admin, first, 10), 0.6)
    tick(app)
    score(admin, checkpoint(admin, second, 10), 0.2)
    tick(app)
    shown = get(admin, created["id"])
    assert shown["trials"][1]["phase"] == "Cancelled"
    assert shown["trials"][1]["stopped_reason"] == (
        "stopped by ASHA at step 10 (rung 10): eval/accuracy 0.2 is not among the best 1 of 2 "
        "trials there (cutoff 0.6, maximize)"
    )
    assert (shown["trials"][0]["value"], shown["trials"][0]["step"]) == (0.6, 10)


def test_the_sweep_waits_for_the_last_checkpoints_score_and_a_failed_eval_waits_for_nothing(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    created = submit(admin, eval_sweep(earlyStopping=None, budget={"trials": 2, "concurrency": 2}))
    tick(app)
    first, second = (t["run_id"] for t in get(admin, created["id"])["trials"])
    for run_id, accuracy in ((first, 0.5), (second, 0.7)):
        start(admin, run_id)
        score(admin, checkpoint(admin, run_id, 10), accuracy)
    last_of_first = checkpoint(admin, first, 40)
    last_of_second = checkpoint(admin, second, 40)
    end(admin, first)
    end(admin, second)
    tick(app)
    assert get(admin, created["id"])["phase"] == "Running"  # both final scores to come

    score(admin, last_of_first, 0.9)
    # The second trial's final eval runs and fails: it gives no score.
    with build_session_factory(app.state.engine)() as session, session.begin():
        (eval_run,) = on_checkpoint_registered(session, checkpoint_id=last_of_second)
    tick(app)
    assert get(admin, created["id"])["phase"] == "Running"  # its eval is still running
    for phase in ("Scheduling", "Running", "Failed"):
        admin.post(f"/api/v1/runs/{eval_run}/phase", json={"phase": phase})
    tick(app)
    ended = get(admin, created["id"])
    assert ended["phase"] == "Succeeded"
    assert ended["best_trial"] == 0  # 0.9 at step 40 beats the second's 0.7 at step 10
    assert [(t["value"], t["step"]) for t in ended["trials"]] == [(0.9, 40), (0.7, 10)]


def test_a_suite_the_trials_do_not_run_or_a_rung_before_the_first_checkpoint_is_refused(
    admin: TestClient,
) -> None:
    make_project(admin)
    unscored = eval_sweep(metric={"name": "eval/accuracy", "goal": "maximize", "evalSuite": "gsm"})
    response = admin.post("/api/v1/sweeps", json={"project": "vision", "manifest": unscored})
    assert response.status_code == 422, response.text
    assert "manifest.spec.metric.evalSuite" in response.text
    assert "scored only by the suites in spec.run.evals (arithmetic)" in response.text

    early = eval_sweep(earlyStopping={"minSteps": 5, "maxSteps": 40})
    response = admin.post("/api/v1/sweeps", json={"project": "vision", "manifest": early})
    assert response.status_code == 422, response.text
    assert "manifest.spec.earlyStopping.minSteps" in response.text
    assert "every 10 steps" in response.text
    assert admin.get("/api/v1/sweeps").json()["items"] == []
