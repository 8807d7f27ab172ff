"""Fault 6 on the control plane's side: recovery never resumes from a checkpoint whose files
no longer match the digest registered for them (the SDK checks again before loading)."""

import shutil
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from crucible.artifacts.digest import content_of
from crucible.core.recovery import resume_checkpoint
from crucible.db.tables import Run
from crucible.settings import Settings
from tests.conftest import make_project, submit


def register(admin: TestClient, run_id: object, directory: Path, step: int) -> dict[str, object]:
    directory.mkdir(parents=True)
    (directory / "shard.distcp").write_bytes(bytes(range(256)) * 4)
    content = content_of(directory)
    response = admin.post(
        f"/api/v1/runs/{run_id}/checkpoints",
        json={
            "step": step,
            "uri": directory.as_uri(),
            "digest": content.digest,
            "size_bytes": content.size_bytes,
        },
    )
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_checkpoint_altered_in_place_is_retired_and_the_one_before_resumed(
    app: FastAPI, admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    # The run's own folder: recovery reads no checkpoint outside its project's storage.
    tmp_path = settings.home / "runs" / str(run_id) / "checkpoints"
    intact = register(admin, run_id, tmp_path / "step-10", 10)
    altered = register(admin, run_id, tmp_path / "step-20", 20)
    missing = register(admin, run_id, tmp_path / "step-30", 30)
    shard = tmp_path / "step-20" / "shard.distcp"
    flipped = bytearray(shard.read_bytes())
    flipped[100] ^= 0xFF  # same size: only the digest can tell
    shard.write_bytes(bytes(flipped))
    shutil.rmtree(tmp_path / "step-30")

    with app.state.session_factory() as session, session.begin():
        run = session.scalars(select(Run).where(Run.id == run_id)).one()
        chosen = resume_checkpoint(session, run)
        assert chosen is not None and chosen.id == intact["id"]

    live = admin.get(f"/api/v1/runs/{run_id}/checkpoints").json()["items"]
    assert [c["step"] for c in live if c["deleted_at"] is None] == [10]
    damaged = [
        e
        for e in admin.get(f"/api/v1/runs/{run_id}/events").json()
        if e["type"] == "CheckpointDamaged"
    ]
    messages = {e["data"]["checkpoint_id"]: e["message"] for e in damaged}
    assert set(messages) == {altered["id"], missing["id"]}
    assert f"{altered['digest']} was registered" in messages[altered["id"]]
    assert "is missing" in messages[missing["id"]]
