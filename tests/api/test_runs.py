"""Submitting runs and driving them through the phase state machine."""

import httpx
import pytest
from fastapi.testclient import TestClient
from s3fs import S3FileSystem  # type: ignore[import-untyped]

from crucible.api.app import create_app
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer, make_project, make_token, submit, training_run
from tests.object_store import ObjectStore


def test_submit_creates_run_and_experiment_and_is_idempotent(admin: TestClient) -> None:
    make_project(admin)
    run = submit(admin)
    assert run["phase"] == "Pending"
    assert run["kind"] == "train"
    again = submit(admin)
    assert again["id"] == run["id"]
    experiments = admin.get("/api/v1/experiments", params={"project": "vision"}).json()["items"]
    assert [e["name"] for e in experiments] == ["exp"]


def test_same_name_with_other_spec_conflicts(admin: TestClient) -> None:
    make_project(admin)
    submit(admin)
    other = training_run(nodes=2)
    response = admin.post("/api/v1/runs", json={"project": "vision", "manifest": other})
    assert response.status_code == 409
    assert "different spec" in response.json()["detail"]


def test_invalid_manifest_names_the_field(admin: TestClient) -> None:
    make_project(admin)
    bad = training_run(gpusPerNode=-1)
    response = admin.post("/api/v1/runs", json={"project": "vision", "manifest": bad})
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert any(e["loc"][-1] == "gpusPerNode" and e["input"] == -1 for e in errors), errors


def test_phase_machine_accepts_valid_and_refuses_invalid(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    for phase in ("Scheduling", "Running"):
        response = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": phase})
        assert response.status_code == 200, response.text
    repeated = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": "Running"})
    assert repeated.status_code == 200
    bad = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": "Pending"})
    assert bad.status_code == 409
    assert "Running" in bad.json()["detail"] and "Pending" in bad.json()["detail"]
    done = admin.post(f"/api/v1/runs/{run_id}/phase", json={"phase": "Succeeded"}).json()
    assert done["finished_at"] is not None and done["started_at"] is not None
    events = admin.get(f"/api/v1/runs/{run_id}/events").json()
    assert [e["type"] for e in events] == ["Submitted"] + ["PhaseChanged"] * 3


def test_attempts_start_end_and_refuse_overlap(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    first = admin.post(f"/api/v1/runs/{run_id}/attempts", json={})
    assert first.status_code == 201 and first.json()["number"] == 1
    overlap = admin.post(f"/api/v1/runs/{run_id}/attempts", json={"reason": "preemption"})
    assert overlap.status_code == 409
    end = {"end_reason": "Preempted", "exit_code": 143}
    assert admin.post(f"/api/v1/runs/{run_id}/attempts/1/end", json=end).status_code == 200
    retried = admin.post(f"/api/v1/runs/{run_id}/attempts/1/end", json=end)
    assert retried.status_code == 200
    second = admin.post(f"/api/v1/runs/{run_id}/attempts", json={"reason": "preemption"})
    assert second.json()["number"] == 2
    attempts = admin.get(f"/api/v1/runs/{run_id}/attempts").json()
    assert [(a["number"], a["start_reason"]) for a in attempts] == [
        (1, "initial"),
        (2, "preemption"),
    ]


def test_cancel_twice_is_a_conflict(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    assert admin.post(f"/api/v1/runs/{run_id}/cancel").json()["phase"] == "Cancelled"
    assert admin.post(f"/api/v1/runs/{run_id}/cancel").status_code == 409


def test_list_runs_paginates_filters_and_sorts(admin: TestClient) -> None:
    make_project(admin)
    ids = [submit(admin, name=f"run-{i}")["id"] for i in range(5)]
    admin.post(f"/api/v1/runs/{ids[0]}/cancel")
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, object] = {
            "project": "vision",
            "limit": 2,
            "sort": "name",
            "descending": False,
        }
        if cursor:
            params["cursor"] = cursor
        page = admin.get("/api/v1/runs", params=params).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    cancelled = admin.get("/api/v1/runs", params={"phase": "Cancelled"}).json()["items"]
    assert [r["id"] for r in cancelled] == [ids[0]]
    garbage = admin.get("/api/v1/runs", params={"cursor": "not-a-cursor"})
    assert garbage.status_code == 422


def test_bad_query_values_are_422_at_their_query_path(admin: TestClient) -> None:
    make_project(admin)
    response = admin.get("/api/v1/runs", params={"tag": "no-equals-sign"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "tag"]
    assert response.json()["detail"][0]["input"] == "no-equals-sign"


def test_the_event_feed_follows_every_visible_run_from_now_on(
    admin: TestClient, client: TestClient
) -> None:
    make_project(admin)
    make_project(admin, "audio")
    start = admin.get("/api/v1/events").json()
    assert start["items"] == []
    vision = submit(admin)["id"]
    audio = submit(admin, project="audio")["id"]
    admin.post(f"/api/v1/runs/{vision}/phase", json={"phase": "Scheduling"})
    page = admin.get("/api/v1/events", params={"after_id": start["next_after_id"]}).json()
    seen = [(e["run_id"], e["type"]) for e in page["items"]]
    assert seen == [(vision, "Submitted"), (audio, "Submitted"), (vision, "PhaseChanged")]
    assert page["next_after_id"] == page["items"][-1]["id"]
    # Paged, in id order, and nothing new after the last page.
    first = admin.get(
        "/api/v1/events", params={"after_id": start["next_after_id"], "limit": 2}
    ).json()
    assert [e["id"] for e in first["items"]] == [e["id"] for e in page["items"][:2]]
    rest = admin.get("/api/v1/events", params={"after_id": first["next_after_id"]}).json()
    assert [e["id"] for e in rest["items"]] == [page["items"][2]["id"]]
    done = admin.get("/api/v1/events", params={"after_id": page["next_after_id"]}).json()
    assert done == {"items": [], "next_after_id": page["next_after_id"]}
    # A project token follows its own project's runs only.
    audio_viewer = bearer(make_token(admin, "audio", "viewer"))
    scoped = client.get(
        "/api/v1/events", params={"after_id": start["next_after_id"]}, headers=audio_viewer
    ).json()
    assert [(e["run_id"], e["type"]) for e in scoped["items"]] == [(audio, "Submitted")]
    assert (
        client.get("/api/v1/events", headers=audio_viewer).json()["next_after_id"]
        == (scoped["items"][-1]["id"])
    )
    bad = admin.get("/api/v1/events", params={"after_id": -1})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "after_id"]
    assert client.get("/api/v1/events").status_code == 401


def test_a_checkpoint_storage_the_pods_cannot_use_is_refused_at_submit_with_the_reason(
    settings: Settings, s3: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both buckets are storage roots: what refuses them here is whether the pods reach them.
    roots = [*settings.storage_roots, f"s3://{s3.bucket}", "s3://no-such-bucket"]
    application = create_app(settings.model_copy(update={"storage_roots": roots}))
    with TestClient(application, headers=bearer(ADMIN_TOKEN)) as admin:
        _refused_at_submit(admin, s3, monkeypatch)
    application.state.engine.dispose()


def _refused_at_submit(admin: TestClient, s3: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(admin)

    def submitted(name: str, storage: str) -> httpx.Response:
        manifest = training_run(name=name, checkpoints={"storage": storage})
        return admin.post("/api/v1/runs", json={"project": "vision", "manifest": manifest})

    assert submitted("in-the-bucket", f"{s3.prefix('ckpt')}").status_code == 201
    missing = submitted("no-bucket", "s3://no-such-bucket/ckpt")
    assert missing.status_code == 422
    assert "s3://no-such-bucket/ckpt" in missing.text
    assert "bucket 'no-such-bucket' does not exist" in missing.text
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    S3FileSystem.clear_instance_cache()
    down = submitted("store-down", f"s3://{s3.bucket}/ckpt")
    assert down.status_code == 422 and "does not answer" in down.text
    # Refused means nothing was written: the names are still free.
    listed = admin.get("/api/v1/runs", params={"project": "vision"}).json()["items"]
    names = [r["name"] for r in listed]
    assert names == ["in-the-bucket"]
