"""Served checkpoints: a backend reports each one it serves, the API resolves its checkpoint
reference in the project on every report, tokens list only what they may see, and editors
promote a checkpoint to one (the worker's patch of the ServedModel: tests/operator/
test_served_models.py)."""

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from crucible.core import deployments
from crucible.db.tables import Checkpoint, OutboxMessage, RunEvent
from crucible.workers import handlers, kubernetes
from tests.api.test_checkpoints_datasets import record_eval, register_checkpoint, submit_train
from tests.conftest import bearer, make_project, make_token

API = "/api/v1/deployments"


def report(
    checkpoint: dict[str, Any],
    *,
    replicas: int = 2,
    ready: int = 1,
    serving: int | None = None,
    phase: str = "Rolling",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "uid": "uid-chat",
        "checkpoint": checkpoint,
        "replicas": replicas,
        "ready_replicas": ready,
        "serving_checkpoint_id": serving,
        "phase": phase,
        "message": "1 of 2 pods ready",
        "url": "http://chat.alpha.svc:8000",
        **extra,
    }


def put(
    client: TestClient, body: dict[str, Any], project: str = "alpha", name: str = "chat"
) -> dict[str, Any]:
    response = client.put(f"{API}/kubernetes/{project}/{name}", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def listed(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = client.get(API, params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@pytest.fixture
def run_id(admin: TestClient) -> int:
    """Run `sft-1` of project alpha, still Pending: a run need not finish to be served."""
    make_project(admin, "alpha")
    run: int = submit_train(admin, project="alpha")["id"]
    return run


def test_report_then_list_and_get(admin: TestClient, run_id: int) -> None:
    old = register_checkpoint(admin, run_id, 100)
    new = register_checkpoint(admin, run_id, 200)
    body = report({"run": "sft-1", "checkpoint": "latest"}, serving=old["id"])
    answer = put(admin, body)
    assert answer["checkpoint_id"] == new["id"] and answer["resolve_error"] is None
    assert answer["resolved"] == {
        "id": new["id"],
        "run_id": run_id,
        "run_name": "sft-1",
        "step": 200,
        "uri": new["uri"],
    }
    assert (answer["serving"]["id"], answer["serving"]["step"]) == (old["id"], 100)
    assert (answer["project"], answer["backend"], answer["name"], answer["uid"]) == (
        "alpha",
        "kubernetes",
        "chat",
        "uid-chat",
    )
    assert (answer["replicas"], answer["ready_replicas"], answer["phase"]) == (2, 1, "Rolling")
    assert answer["url"] == "http://chat.alpha.svc:8000"
    assert answer["message"] == "1 of 2 pods ready"
    assert answer["checkpoint"]["run"] == "sft-1"

    assert listed(admin) == [answer]
    assert listed(admin, project="alpha") == [answer]
    assert admin.get(f"{API}/{answer['id']}").json() == answer
    assert admin.get(f"{API}/{answer['id'] + 1}").status_code == 404

    # The pods rolled: the same deployment now serves what it wants.
    rolled = put(admin, report({"run": "sft-1"}, ready=2, serving=new["id"], phase="Ready"))
    assert rolled["id"] == answer["id"]
    assert (rolled["serving_checkpoint_id"], rolled["phase"]) == (new["id"], "Ready")
    assert [d["id"] for d in listed(admin)] == [answer["id"]]


def test_references_resolve_by_id_latest_and_best(admin: TestClient, run_id: int) -> None:
    ids = {step: register_checkpoint(admin, run_id, step)["id"] for step in (100, 200, 300)}
    record_eval(admin, ids[100], {"accuracy": 0.5})
    record_eval(admin, ids[200], {"accuracy": 0.9})
    record_eval(admin, ids[300], {"accuracy": 0.7})

    assert put(admin, report({"id": ids[100]}))["checkpoint_id"] == ids[100]
    assert put(admin, report({"run": "sft-1", "checkpoint": "latest"}))["checkpoint_id"] == ids[300]
    best = put(admin, report({"run": "sft-1", "checkpoint": "best:accuracy"}))
    assert (best["checkpoint_id"], best["resolved"]["step"]) == (ids[200], 200)
    assert best["checkpoint"] == {"id": None, "run": "sft-1", "checkpoint": "best:accuracy"}

    # Resolved again on each report: a newer checkpoint moves `latest`.
    newest = register_checkpoint(admin, run_id, 400)["id"]
    assert put(admin, report({"run": "sft-1"}))["checkpoint_id"] == newest


def test_a_reference_that_does_not_resolve_is_stored_with_the_reason(
    admin: TestClient, app: FastAPI, run_id: int
) -> None:
    make_project(admin, "beta")
    elsewhere = register_checkpoint(admin, submit_train(admin, project="beta")["id"], 10)["id"]
    cases = [
        ({"run": "sft-1"}, "run 'sft-1' has no checkpoint yet"),
        ({"run": "nope"}, "run 'nope' does not exist in project 'alpha'"),
        ({"id": 999999}, "checkpoint 999999 does not exist in project 'alpha'"),
        ({"id": elsewhere}, f"checkpoint {elsewhere} does not exist in project 'alpha'"),
    ]
    for ref, reason in cases:
        answer = put(admin, report(ref))
        assert (answer["checkpoint_id"], answer["resolved"]) == (None, None), ref
        assert answer["resolve_error"] == reason
    checkpoint = register_checkpoint(admin, run_id, 100)["id"]
    no_eval = put(admin, report({"run": "sft-1", "checkpoint": "best:bleu"}))
    assert (
        no_eval["resolve_error"] == "no checkpoint of run 'sft-1' has an eval score for 'bleu' yet"
    )
    with app.state.session_factory.begin() as session:  # retention deleted it
        session.get_one(Checkpoint, checkpoint).deleted_at = datetime.now(UTC)
    deleted = put(admin, report({"id": checkpoint}))
    assert deleted["checkpoint_id"] is None
    assert f"checkpoint {checkpoint} was deleted by retention" in deleted["resolve_error"]
    assert (
        put(admin, report({"run": "sft-1"}))["resolve_error"] == "run 'sft-1' has no checkpoint yet"
    )

    # The stored state is what GET shows, and a resolving report clears the reason.
    assert admin.get(f"{API}/{deleted['id']}").json()["resolve_error"] is not None
    fixed = put(admin, report({"id": register_checkpoint(admin, run_id, 200)["id"]}))
    assert fixed["resolve_error"] is None and fixed["resolved"]["step"] == 200


def test_the_same_report_twice_changes_nothing_but_updated_at(
    admin: TestClient, run_id: int
) -> None:
    checkpoint = register_checkpoint(admin, run_id, 100)["id"]
    body = report({"id": checkpoint}, serving=checkpoint, phase="Ready", ready=2)
    first = put(admin, body)
    again = put(admin, body)
    assert again["updated_at"] >= first["updated_at"]
    assert {k: v for k, v in again.items() if k != "updated_at"} == {
        k: v for k, v in first.items() if k != "updated_at"
    }
    assert len(listed(admin)) == 1


def test_delete_is_idempotent(admin: TestClient, run_id: int) -> None:
    kept = put(admin, report({"run": "sft-1"}), name="kept")
    gone = put(admin, report({"run": "sft-1"}), name="gone")
    # The same name on the other backend is another deployment.
    local = admin.put(f"{API}/local/alpha/gone", json=report({"run": "sft-1"}))
    assert local.status_code == 200 and local.json()["id"] not in (kept["id"], gone["id"])
    for _ in range(2):
        response = admin.delete(f"{API}/kubernetes/alpha/gone")
        assert response.status_code == 204 and response.content == b""
    assert admin.get(f"{API}/{gone['id']}").status_code == 404
    assert {d["name"] for d in listed(admin)} == {"kept", "gone"}  # the local one stays
    assert admin.delete(f"{API}/kubernetes/no-such-project/gone").status_code == 204


def test_tokens_see_only_their_projects_and_only_a_global_admin_writes(
    admin: TestClient, client: TestClient, run_id: int
) -> None:
    make_project(admin, "beta")
    ours = put(admin, report({"run": "sft-1"}), project="alpha")
    theirs = put(admin, report({"run": "sft-1"}), project="beta")
    assert [d["id"] for d in listed(admin)] == [theirs["id"], ours["id"]]  # newest first

    viewer = bearer(make_token(admin, "alpha", "viewer"))
    assert [d["id"] for d in client.get(API, headers=viewer).json()["items"]] == [ours["id"]]
    assert client.get(f"{API}/{ours['id']}", headers=viewer).status_code == 200
    hidden = client.get(f"{API}/{theirs['id']}", headers=viewer)
    assert hidden.status_code == 404 and str(theirs["id"]) in hidden.text
    assert client.get(API, params={"project": "beta"}, headers=viewer).status_code == 404

    project_admin = bearer(make_token(admin, "alpha", "admin"))
    changed = report({"run": "sft-1"}, replicas=9)
    refused = client.put(f"{API}/kubernetes/alpha/chat", json=changed, headers=project_admin)
    assert refused.status_code == 403 and "global admin" in refused.text
    refused = client.delete(f"{API}/kubernetes/alpha/chat", headers=project_admin)
    assert refused.status_code == 403
    assert client.get(API).status_code == 401
    assert admin.get(f"{API}/{ours['id']}").json()["replicas"] == 2  # nothing was written


def test_paging_follows_the_cursor(admin: TestClient, run_id: int) -> None:
    for name in ("a", "b", "c"):
        put(admin, report({"run": "sft-1"}), name=name)
    first = admin.get(API, params={"limit": 2}).json()
    assert [d["name"] for d in first["items"]] == ["c", "b"]
    rest = admin.get(API, params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert ([d["name"] for d in rest["items"]], rest["next_cursor"]) == (["a"], None)


@pytest.mark.parametrize(
    ("path", "change", "field"),
    [
        ("kubernetes/alpha/chat", {"replicas": -1}, "replicas"),
        ("kubernetes/alpha/chat", {"ready_replicas": -1}, "ready_replicas"),
        ("kubernetes/alpha/chat", {"phase": "Sleeping"}, "phase"),
        ("kubernetes/alpha/chat", {"message": "x" * 4001}, "message"),
        ("kubernetes/alpha/chat", {"checkpoint": {"run": "sft-1", "id": 1}}, "checkpoint"),
        (
            "kubernetes/alpha/chat",
            {"checkpoint": {"run": "sft-1", "checkpoint": "best"}},
            "checkpoint",
        ),
        ("kubernetes/alpha/chat", {"surprise": 1}, "surprise"),
        ("kubernetes/alpha/Chat_1", {}, "name"),
        ("kubernetes/alpha/" + "a" * 64, {}, "name"),
        ("docker/alpha/chat", {}, "backend"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    admin: TestClient, run_id: int, path: str, change: dict[str, Any], field: str
) -> None:
    response = admin.put(f"{API}/{path}", json=report({"run": "sft-1"}) | change)
    assert response.status_code == 422, response.text
    assert field in {str(part) for error in response.json()["detail"] for part in error["loc"]}
    assert listed(admin) == []


def test_refusals_that_need_the_database(admin: TestClient, run_id: int) -> None:
    missing = admin.put(f"{API}/kubernetes/nowhere/chat", json=report({"run": "sft-1"}))
    assert missing.status_code == 404 and "nowhere" in missing.text
    make_project(admin, "beta")
    other = register_checkpoint(admin, submit_train(admin, project="beta")["id"], 10)["id"]
    foreign = admin.put(
        f"{API}/kubernetes/alpha/chat", json=report({"run": "sft-1"}, serving=other)
    )
    assert foreign.status_code == 422 and "serving_checkpoint_id" in foreign.text
    assert listed(admin) == []


# --- promotion --------------------------------------------------------------------------------


def promotions(app: FastAPI) -> list[dict[str, Any]]:
    """The promotions waiting for the workers, oldest first, with their dedupe keys."""
    with app.state.session_factory() as session:
        rows = session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.topic == "deployment.promoted")
            .order_by(OutboxMessage.id)
        )
        return [{"key": row.dedupe_key, "id": row.id, **row.payload} for row in rows]


def promote(client: TestClient, deployment_id: int, checkpoint_id: Any, **kwargs: Any) -> Any:
    return client.post(
        f"{API}/{deployment_id}/promote", json={"checkpoint_id": checkpoint_id}, **kwargs
    )


def test_a_promotion_is_accepted_recorded_and_enqueued_together(
    admin: TestClient, app: FastAPI, run_id: int
) -> None:
    old, new = (register_checkpoint(admin, run_id, step)["id"] for step in (100, 200))
    chat = put(admin, report({"run": "sft-1"}, serving=old))
    editor = bearer(make_token(admin, "alpha", "editor"))

    response = promote(admin, chat["id"], new, headers=editor)
    assert response.status_code == 202, response.text
    accepted = {"deployment_id": chat["id"], "checkpoint_id": new, "namespace": "alpha"}
    assert response.json() == accepted | {"name": "chat"}

    # The run's timeline says who asked for what, and what the pods served before.
    events = admin.get(f"/api/v1/runs/{run_id}/events").json()
    promoted = [e for e in events if e["type"] == "CheckpointPromoted"]
    assert len(promoted) == 1
    assert promoted[0]["message"] == "checkpoint at step 200 promoted to deployment 'chat'"
    assert promoted[0]["data"]["serving_checkpoint_id"] == old
    assert promoted[0]["data"]["token_id"] is not None
    [message] = promotions(app)
    assert message["key"] == f"deployment.promoted:{chat['id']}:{promoted[0]['id']}"
    assert message | accepted == message and message["event_id"] == promoted[0]["id"]

    # Nothing about the deployment changes until the operator reports the new reference.
    assert admin.get(f"{API}/{chat['id']}").json() == chat
    # Promoting it again, or back, is another promotion each time.
    assert promote(admin, chat["id"], new).status_code == 202
    assert promote(admin, chat["id"], old).status_code == 202
    assert [m["checkpoint_id"] for m in promotions(app)] == [new, new, old]


def test_a_failure_after_the_enqueue_leaves_neither_the_event_nor_the_message(
    admin: TestClient, app: FastAPI, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = register_checkpoint(admin, run_id, 100)["id"]
    chat = put(admin, report({"run": "sft-1"}))
    real_enqueue = deployments.enqueue

    def enqueue_then_fail(*args: Any, **kwargs: Any) -> None:
        real_enqueue(*args, **kwargs)
        raise RuntimeError("the database went away mid-request")

    monkeypatch.setattr(deployments, "enqueue", enqueue_then_fail)
    with pytest.raises(RuntimeError):
        promote(admin, chat["id"], checkpoint)
    assert promotions(app) == []
    with app.state.session_factory() as session:
        assert session.scalars(select(RunEvent.type)).all().count("CheckpointPromoted") == 0


def test_promotion_refusals_name_the_reason_and_enqueue_nothing(
    admin: TestClient, client: TestClient, app: FastAPI, run_id: int
) -> None:
    make_project(admin, "beta")
    elsewhere = register_checkpoint(admin, submit_train(admin, project="beta")["id"], 10)["id"]
    retired = register_checkpoint(admin, run_id, 100)["id"]
    with app.state.session_factory.begin() as session:
        session.get_one(Checkpoint, retired).deleted_at = datetime.now(UTC)
    live = register_checkpoint(admin, run_id, 200)["id"]
    chat = put(admin, report({"run": "sft-1"}))

    for checkpoint, reason in (
        (elsewhere, f"checkpoint {elsewhere} does not exist in project 'alpha'"),
        (999999, "checkpoint 999999 does not exist in project 'alpha'"),
        (retired, f"checkpoint {retired} was deleted by retention; name another checkpoint"),
    ):
        refused = promote(admin, chat["id"], checkpoint)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["detail"]
        assert error["loc"] == ["body", "checkpoint_id"] and reason in error["msg"]

    viewer = promote(client, chat["id"], live, headers=bearer(make_token(admin, "alpha", "viewer")))
    assert viewer.status_code == 403
    assert viewer.json()["detail"] == "this token's role viewer cannot do this; it needs editor"
    beta_admin = bearer(make_token(admin, "beta", "admin"))
    hidden = promote(client, chat["id"], live, headers=beta_admin)
    assert (
        hidden.status_code == 404
        and hidden.json()["detail"] == f"deployment {chat['id']} not found"
    )
    missing = promote(admin, chat["id"] + 100, live)
    assert missing.status_code == 404, missing.text
    local = admin.put(f"{API}/local/alpha/laptop", json=report({"run": "sft-1"})).json()
    on_local = promote(admin, local["id"], live)
    assert on_local.status_code == 409 and "local backend" in on_local.json()["detail"]
    assert promotions(app) == []


def test_the_worker_patches_only_the_latest_promotion_of_a_deployment(
    admin: TestClient, app: FastAPI, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = (register_checkpoint(admin, run_id, step)["id"] for step in (100, 200))
    chat = put(admin, report({"run": "sft-1"}))
    other = put(admin, report({"run": "sft-1"}), name="other")
    patched: list[tuple[str, str, int]] = []

    def serve_checkpoint(namespace: str, name: str, checkpoint_id: int) -> str:
        patched.append((namespace, name, checkpoint_id))
        return "patched"

    monkeypatch.setattr(kubernetes, "serve_checkpoint", serve_checkpoint)
    for deployment, checkpoint in ((chat, first), (chat, second), (other, first)):
        assert promote(admin, deployment["id"], checkpoint).status_code == 202
    stale, newest, elsewhere = promotions(app)
    # Delivered out of order: the newer promotion first, then the stale one, which must not
    # undo it; another deployment's promotion is its own.
    factory = app.state.session_factory
    assert handlers.handle_message(factory, newest["id"]) == "patched"
    assert "later promotion" in handlers.handle_message(factory, stale["id"])
    assert handlers.handle_message(factory, elsewhere["id"]) == "patched"
    assert handlers.handle_message(factory, newest["id"]) == "already handled"
    assert patched == [("alpha", "chat", second), ("alpha", "other", first)]
