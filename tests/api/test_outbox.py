"""The transactional outbox: follow-ups commit with their change, once, whatever the retries."""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from crucible.db.tables import OutboxMessage
from tests.api.test_checkpoints_datasets import API, digest, register_checkpoint, submit_train
from tests.checkpoint_files import checkpoint_files
from tests.conftest import SHARED_BUCKET, make_project, postgres_only, training_run


def outbox(app: FastAPI, topic: str) -> list[dict[str, Any]]:
    with app.state.session_factory() as session:
        rows = session.scalars(
            select(OutboxMessage).where(OutboxMessage.topic == topic).order_by(OutboxMessage.id)
        )
        return [
            {"dedupe_key": r.dedupe_key, "payload": r.payload, "sent_at": r.sent_at} for r in rows
        ]


def test_checkpoint_registration_enqueues_exactly_once(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run = submit_train(admin)
    first = register_checkpoint(admin, run["id"], 100, content="a")
    for _ in range(2):  # a client retrying after a lost response
        assert register_checkpoint(admin, run["id"], 100, content="a")["id"] == first["id"]

    rows = outbox(app, "checkpoint.registered")
    assert len(rows) == 1
    assert rows[0]["dedupe_key"] == f"checkpoint.registered:{first['id']}"
    assert rows[0]["sent_at"] is None
    payload = rows[0]["payload"]
    assert payload["checkpoint_id"] == first["id"] and payload["run_id"] == run["id"]
    assert payload["project_id"] == run["project_id"] and payload["step"] == 100
    assert (
        payload["uri"] == first["uri"]
        and payload["digest"] == checkpoint_files(run["id"], 100, "a")["digest"]
    )


def test_refused_checkpoint_enqueues_nothing(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    register_checkpoint(admin, run_id, 100, content="a")
    clash = admin.post(
        f"{API}/runs/{run_id}/checkpoints",
        json={"step": 100, "uri": "s3://x", "digest": digest("b"), "size_bytes": 1},
    )
    assert clash.status_code == 409
    missing_attempt = admin.post(
        f"{API}/runs/{run_id}/checkpoints",
        json={"step": 200, "uri": "s3://x", "digest": digest("c"), "size_bytes": 1, "attempt": 3},
    )
    assert missing_attempt.status_code == 404
    assert len(outbox(app, "checkpoint.registered")) == 1

    register_checkpoint(admin, run_id, 200, content="c")
    steps = [row["payload"]["step"] for row in outbox(app, "checkpoint.registered")]
    assert steps == [100, 200]


@postgres_only
def test_concurrent_retries_of_one_checkpoint_enqueue_once(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run_id = submit_train(admin)["id"]
    uri = f"{SHARED_BUCKET}/runs/{run_id}/x"  # the run's own folder
    body = {"step": 100, "uri": uri, "digest": digest("a"), "size_bytes": 1}
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(
            pool.map(lambda _: admin.post(f"{API}/runs/{run_id}/checkpoints", json=body), range(8))
        )
    assert [r.status_code for r in responses] == [201] * 8
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(outbox(app, "checkpoint.registered")) == 1


def test_only_a_run_that_needs_its_resource_made_enqueues_run_submitted(
    admin: TestClient, app: FastAPI
) -> None:
    """A run the operator registered (applied with kubectl: it comes with its resource's
    uid) has nothing for the workers to do; one submitted through the API does."""
    make_project(admin)
    for name, uid in (("applied", "uid-applied"), ("posted", None)):
        body = {"project": "vision", "manifest": training_run(name=name)}
        body |= {"backend": "kubernetes", "k8s_uid": uid}
        assert admin.post(f"{API}/runs", json=body).status_code == 201
    runs = {r["name"]: r["id"] for r in admin.get(f"{API}/runs").json()["items"]}
    rows = outbox(app, "run.submitted")
    assert [r["payload"]["run_id"] for r in rows] == [runs["posted"]]
