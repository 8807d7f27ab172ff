"""GET /api/v1/run-summaries: goodput and best eval per run, for the dashboard's runs table."""

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token, submit, training_run

URL = "/api/v1/run-summaries"


def _checkpoint(admin: TestClient, run_id: Any, step: int, **scores: float) -> None:
    body = {
        "step": step,
        "uri": f"{SHARED_BUCKET}/runs/{run_id}/{step}",
        "digest": f"sha256:{step:064x}",
        "size_bytes": 1,
    }
    saved = admin.post(f"/api/v1/runs/{run_id}/checkpoints", json=body)
    assert saved.status_code == 201, saved.text
    result = {"checkpoint_id": saved.json()["id"], "suite": "heldout", "scores": scores}
    assert admin.post("/api/v1/evals", json=result).status_code == 201


def test_best_eval_by_the_spec_or_by_the_metric_name(admin: TestClient) -> None:
    make_project(admin)
    ranked = admin.post(
        "/api/v1/runs",
        json={
            "project": "vision",
            "manifest": training_run(name="ranked", checkpoints={"best": "min:loss"}),
        },
    ).json()
    guessed = submit(admin, name="guessed")
    unscored = submit(admin, name="unscored")
    for run in (ranked, guessed):
        _checkpoint(admin, run["id"], 100, accuracy=0.5, loss=0.9)
        _checkpoint(admin, run["id"], 200, accuracy=0.8, loss=0.3)
        _checkpoint(admin, run["id"], 300, accuracy=0.7, loss=0.4)

    ids = [unscored["id"], ranked["id"], guessed["id"]]
    response = admin.get(URL, params={"ids": ids})
    assert response.status_code == 200, response.text
    summaries = response.json()
    assert [s["run_id"] for s in summaries] == ids  # in the order asked
    assert summaries[0] == {"run_id": unscored["id"], "goodput": None, "best_eval": None}
    by_spec = summaries[1]["best_eval"]
    assert (by_spec["metric"], by_spec["mode"], by_spec["value"], by_spec["step"]) == (
        "loss",
        "min",
        0.3,
        200,
    )
    assert by_spec["ranked_by"] == "spec"
    by_name = summaries[2]["best_eval"]
    assert (by_name["metric"], by_name["mode"], by_name["value"], by_name["ranked_by"]) == (
        "accuracy",
        "max",
        0.8,
        "name",
    )


def test_goodput_counts_the_work_an_interruption_lost(admin: TestClient) -> None:
    make_project(admin)
    run = submit(admin)
    rid = run["id"]
    assert admin.post(f"/api/v1/runs/{rid}/attempts", json={"reason": "initial"}).is_success
    end = {"end_reason": "Preempted", "exit_code": 143}
    assert admin.post(f"/api/v1/runs/{rid}/attempts/1/end", json=end).is_success
    summary = admin.get(URL, params={"ids": [rid]}).json()[0]
    expected = admin.get(f"/api/v1/runs/{rid}/goodput").json()["goodput"]
    assert summary["goodput"] == expected


def test_other_projects_runs_are_left_out(admin: TestClient, client: TestClient) -> None:
    make_project(admin, "vision")
    make_project(admin, "audio")
    mine = submit(admin, project="vision", name="mine")
    theirs = submit(admin, project="audio", name="theirs")
    token = make_token(admin, "vision", "viewer")
    response = client.get(URL, params={"ids": [mine["id"], theirs["id"]]}, headers=bearer(token))
    assert [s["run_id"] for s in response.json()] == [mine["id"]]


def test_too_many_or_no_ids_is_a_422(admin: TestClient) -> None:
    assert admin.get(URL).status_code == 422
    assert admin.get(URL, params={"ids": list(range(1, 202))}).status_code == 422
