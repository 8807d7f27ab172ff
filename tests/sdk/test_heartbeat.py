"""Heartbeats: the SDK sends them; the API stores them on the attempt."""

import time
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient

import crucible
from crucible.client import CrucibleClient
from tests.conftest import make_project, submit
from tests.sdk.conftest import new_run


def test_sdk_heartbeats_update_the_attempt(api: CrucibleClient, sdk_env: Path) -> None:
    run_id = new_run(api)
    assert api.list_attempts(run_id)[0].heartbeat_at is None
    run = crucible.init(run_id=run_id, attempt=1, heartbeat_interval=0.2)
    deadline = time.monotonic() + 30
    beats: list[datetime] = []
    while time.monotonic() < deadline and len(set(beats)) < 2:
        beat = api.list_attempts(run_id)[0].heartbeat_at
        if beat is not None:
            beats.append(beat)
        time.sleep(0.2)
    run.finish()
    assert len(set(beats)) >= 2, "heartbeat_at moves forward while the run lives"


def test_heartbeat_endpoint(admin: TestClient) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    assert admin.post(f"/api/v1/runs/{run_id}/attempts", json={}).status_code == 201

    beat = admin.post(f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 1})
    assert beat.status_code == 200, beat.text
    assert beat.json()["heartbeat_at"] is not None
    listed = admin.get(f"/api/v1/runs/{run_id}/attempts").json()
    assert listed[0]["heartbeat_at"] == beat.json()["heartbeat_at"]

    missing = admin.post(f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 2})
    assert missing.status_code == 404
    assert admin.post(f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 0}).status_code == 422
    admin.post(f"/api/v1/runs/{run_id}/attempts/1/end", json={"end_reason": "Completed"})
    ended = admin.post(f"/api/v1/runs/{run_id}/heartbeat", json={"attempt": 1})
    assert ended.status_code == 409 and "already ended" in ended.json()["detail"]
