"""Errors name what the caller can see (a run's folder under `<crucible home>`, the URI they
gave), never the absolute paths where the server keeps its files."""

from pathlib import Path

from fastapi.testclient import TestClient

from crucible.api.errors import HOME_NAME, without_server_paths
from crucible.settings import Settings
from tests.conftest import make_project, submit

API = "/api/v1"


def assert_no_server_path(text: str, settings: Settings) -> None:
    for spelling in {str(settings.home), str(settings.home.resolve())}:
        assert spelling not in text, text


def test_a_missing_trace_names_the_profile_not_the_servers_folder(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    response = admin.get(f"{API}/runs/{run_id}/profiles/rank0-steps3-4/trace")
    assert response.status_code == 404, response.text
    assert "rank0-steps3-4" in response.text
    assert_no_server_path(response.text, settings)


def test_a_dataset_outside_the_storage_roots_is_refused_without_the_servers_paths(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    body = {
        "project": "vision",
        "name": "stolen",
        "uri": "file:///etc/passwd",
        "digest": "sha256:" + "0" * 64,
    }
    response = admin.post(f"{API}/datasets/versions", json=body)
    assert response.status_code == 422, response.text
    assert "file:///etc/passwd" in response.text  # the URI the caller gave, named
    assert_no_server_path(response.text, settings)


def test_a_checkpoint_outside_the_projects_storage_is_refused_without_the_servers_paths(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    run_id = submit(admin)["id"]
    body = {
        "step": 1,
        "uri": "file:///var/elsewhere/ckpt",
        "digest": "sha256:" + "0" * 64,
        "size_bytes": 1,
    }
    response = admin.post(f"{API}/runs/{run_id}/checkpoints", json=body)
    assert response.status_code == 422, response.text
    assert_no_server_path(response.text, settings)


def test_every_spelling_of_the_home_reads_as_its_name(tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    real.mkdir()
    (tmp_path / "home-link").symlink_to(real)
    home = tmp_path / "home-link"
    text = f"no trace at {real}/runs/3 or {home}/runs/4 (file://{home}/projects/1/)"
    assert without_server_paths(text, home) == (
        f"no trace at {HOME_NAME}/runs/3 or {HOME_NAME}/runs/4 (file://{HOME_NAME}/projects/1/)"
    )
    assert without_server_paths("nothing here", None) == "nothing here"
