"""A deleted project leaves nothing a later one can reach. Before, SQLite handed the deleted
project's ids (project, experiment, run) to the next ones, whose runs then found the
deleted runs' `runs/<id>/` logs and outputs and MLflow artifact folders, still on disk:
`log-tail?attempt=1` of a run that never started served a deleted project's log, with the
token it printed, to another project's viewer."""

import os
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from crucible.artifacts import storage
from crucible.core.run_logs import log_path
from crucible.settings import Settings
from tests.conftest import bearer, make_project, make_token, submit, training_run


def started_run(admin: TestClient, settings: Settings, project: str) -> dict[str, Any]:
    """A run of `project` whose first attempt printed a secret, wrote an output and logged
    an MLflow artifact, all where the local executor and the artifact proxy put them."""
    run: dict[str, Any] = submit(admin, project, "leaky")
    assert admin.post(f"/api/v1/runs/{run['id']}/attempts", json={"reason": "initial"}).is_success
    log = log_path(settings.home, run["id"], 1)
    log.parent.mkdir(parents=True)
    log.write_text("CRUCIBLE_TOKEN=secret-of-a\n")
    (log.parent / "outputs").mkdir()
    (log.parent / "outputs" / "model.bin").write_bytes(b"weights")
    artifacts = mlflow_folder(settings, run["experiment_id"])
    (artifacts / str(run["id"]) / "artifacts").mkdir(parents=True)
    (artifacts / str(run["id"]) / "artifacts" / "notes.txt").write_text("a's notes")
    return run


def mlflow_folder(settings: Settings, experiment_id: int) -> Path:
    root = storage.local_path(settings.resolved_mlflow_artifact_root)
    assert root is not None
    return root / str(experiment_id)


def test_a_deleted_projects_ids_files_and_logs_never_reach_a_new_project(
    admin: TestClient, settings: Settings
) -> None:
    old_project = make_project(admin, "a")
    old = started_run(admin, settings, "a")
    deleted = admin.delete(f"/api/v1/projects/{old_project['id']}", params={"force": "true"})
    assert deleted.status_code == 200, deleted.text
    assert not (settings.home / "runs" / str(old["id"])).exists()
    assert not mlflow_folder(settings, old["experiment_id"]).exists()

    new_project = make_project(admin, "b")
    new: dict[str, Any] = submit(admin, "b", "leaky")
    assert new_project["id"] != old_project["id"]
    assert new["id"] != old["id"] and new["experiment_id"] != old["experiment_id"]
    viewer = bearer(make_token(admin, "b", "viewer"))
    tail = admin.get(f"/api/v1/runs/{new['id']}/log-tail", params={"attempt": 1}, headers=viewer)
    assert tail.status_code == 404, tail.text
    assert "secret-of-a" not in tail.text


def test_a_force_deleted_experiment_takes_its_runs_files_and_no_others(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin, "a")
    run = started_run(admin, settings, "a")
    sibling = admin.post(
        "/api/v1/runs", json={"project": "a", "manifest": training_run("kept", "other")}
    ).json()
    kept = settings.home / "runs" / str(sibling["id"])
    kept.mkdir(parents=True)
    deleted = admin.delete(f"/api/v1/experiments/{run['experiment_id']}", params={"force": "true"})
    assert deleted.status_code == 200, deleted.text
    assert not (settings.home / "runs" / str(run["id"])).exists()
    assert not mlflow_folder(settings, run["experiment_id"]).exists()
    assert kept.exists()


def deep_tree(top: Path, depth: int) -> None:
    """A folder `depth` levels deep under `top`, made by relative steps: its full path is
    longer than the system lets one call name, as a run's own code can make it."""
    top.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=descriptor)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=descriptor), "w") as f:
            f.write("deep")
    finally:
        os.close(descriptor)


def test_a_run_folder_deeper_than_rmtree_recurses_is_removed_with_its_project(
    admin: TestClient, settings: Settings
) -> None:
    project = make_project(admin, "a")
    run = started_run(admin, settings, "a")
    folder = settings.home / "runs" / str(run["id"])
    deep_tree(folder / "outputs" / "deep", 2_000)  # shutil.rmtree: RecursionError on 3.11
    deep_tree(mlflow_folder(settings, run["experiment_id"]) / "deep", 2_000)
    deleted = admin.delete(f"/api/v1/projects/{project['id']}", params={"force": "true"})
    assert deleted.status_code == 200, deleted.text
    assert not folder.exists()
    assert not mlflow_folder(settings, run["experiment_id"]).exists()
