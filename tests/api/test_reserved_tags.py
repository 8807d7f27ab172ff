"""Run tags under `crucible.dev/` are the platform's: retention, the eval-scored sweeps and
the eval trigger act on them. A user's submission may not set them (a reproduction's tag
only naming a run of its own project), the eval trigger's own runs still carry them, and
what reads them trusts them only within one project. Before, a waiting eval run tagged
`crucible.dev/checkpoint: "x"` crashed retention for every project, and such tags could
pin another project's checkpoints or feed another project's sweep."""

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.core.eval_trigger import on_checkpoint_registered
from crucible.core.sweep_scores import awaiting_scores
from crucible.db.engine import transaction
from crucible.db.tables import Checkpoint, Run
from crucible.domain.resources import TAG_CHECKPOINT, TAG_EVALUATES_RUN, TAG_REPRODUCES
from tests.conftest import bearer, make_project, make_token, submit, training_run

SUITE = "arithmetic"


def post_run(
    client: TestClient, project: str, manifest: dict[str, Any], tags: dict[str, str], **kw: Any
) -> Any:
    return client.post(
        "/api/v1/runs", json={"project": project, "manifest": manifest, "tags": tags}, **kw
    )


def add_checkpoint(app: FastAPI, run_id: int, step: int = 10) -> int:
    """A checkpoint row as registration leaves it (its files play no part here)."""
    with transaction(app.state.session_factory) as session:
        row = Checkpoint(
            run_id=run_id, step=step, uri=f"s3://b/{run_id}/{step}", digest="d", size_bytes=1
        )
        session.add(row)
        session.flush()
        return row.id


def eval_job(name: str, checkpoint_id: int) -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "EvalJob",
        "metadata": {"name": name},
        "spec": {"experiment": "exp", "checkpoint": {"id": checkpoint_id}, "suite": SUITE},
    }


@pytest.mark.parametrize("tag", [TAG_CHECKPOINT, TAG_EVALUATES_RUN, "crucible.dev/anything"])
def test_a_submission_may_not_set_a_reserved_tag(admin: TestClient, tag: str) -> None:
    make_project(admin)
    editor = bearer(make_token(admin, "vision", "editor"))
    answer = post_run(admin, "vision", training_run(), {"team": "a", tag: "x"}, headers=editor)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"][:2] == ["body", "tags"]
    assert f"tag {tag!r} is reserved" in detail["msg"]
    assert admin.get("/api/v1/runs").json()["items"] == []


def test_another_projects_checkpoint_cannot_be_pinned_by_a_tag(
    app: FastAPI, admin: TestClient
) -> None:
    """A waiting eval run tagged with a checkpoint keeps it from retention: project b may
    not make one naming a's checkpoint."""
    make_project(admin, "a")
    make_project(admin, "b")
    theirs = add_checkpoint(app, int(submit(admin, "a", "base")["id"]))  # type: ignore[call-overload]
    b_editor = bearer(make_token(admin, "b", "editor"))
    answer = post_run(
        admin, "b", eval_job("pin", 1), {TAG_CHECKPOINT: str(theirs)}, headers=b_editor
    )
    assert answer.status_code == 422, answer.text
    assert TAG_CHECKPOINT in answer.json()["detail"][0]["msg"]


def test_a_reproduction_names_a_run_of_its_own_project(admin: TestClient) -> None:
    make_project(admin, "a")
    make_project(admin, "b")
    theirs = submit(admin, "a", "original")["id"]
    ours = submit(admin, "b", "original")["id"]
    for value in (str(theirs), "not-a-run", "99999999"):
        answer = post_run(admin, "b", training_run("again"), {TAG_REPRODUCES: value})
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"][0]
        assert detail["loc"] == ["body", "tags"]
        assert f"tag {TAG_REPRODUCES!r} names no run of project 'b'" in detail["msg"]
        assert value in detail["msg"]
    answer = post_run(admin, "b", training_run("again"), {TAG_REPRODUCES: str(ours)})
    assert answer.status_code == 201, answer.text
    assert answer.json()["tags"] == {TAG_REPRODUCES: str(ours)}


def test_the_eval_triggers_runs_still_carry_the_reserved_tags(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    manifest = training_run("scored", evals=[{"suite": SUITE}])
    run = post_run(admin, "vision", manifest, {}).json()
    checkpoint_id = add_checkpoint(app, run["id"])
    with transaction(app.state.session_factory) as session:
        (eval_id,) = on_checkpoint_registered(session, checkpoint_id=checkpoint_id)
    tags = admin.get(f"/api/v1/runs/{eval_id}").json()["tags"]
    assert tags == {TAG_EVALUATES_RUN: str(run["id"]), TAG_CHECKPOINT: str(checkpoint_id)}


def test_an_eval_run_of_another_project_does_not_feed_a_sweep(
    app: FastAPI, admin: TestClient
) -> None:
    """A trial's checkpoint counts as scored once an eval run of it has ended: only an eval
    run of the trial's own project counts (a row tagged before the tags were reserved, or
    written some other way, is no proof)."""
    make_project(admin, "a")
    make_project(admin, "b")
    trial = int(submit(admin, "a", "trial-000")["id"])  # type: ignore[call-overload]
    checkpoint_id = add_checkpoint(app, trial)
    outsider = post_run(admin, "b", eval_job("outsider", checkpoint_id), {}).json()["id"]
    insider = post_run(admin, "a", eval_job("insider", checkpoint_id), {}).json()["id"]
    factory = app.state.session_factory
    with transaction(factory) as session:
        for run_id in (outsider, insider):
            run = session.get_one(Run, run_id)
            run.tags = {TAG_EVALUATES_RUN: str(trial), TAG_CHECKPOINT: str(checkpoint_id)}
        session.get_one(Run, outsider).phase = "Failed"  # its eval is over
    with transaction(factory) as session:
        assert awaiting_scores(session, [trial], SUITE) == {trial}
        session.get_one(Run, insider).phase = "Failed"
        session.flush()
        assert awaiting_scores(session, [trial], SUITE) == set()
