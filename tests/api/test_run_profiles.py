"""GET /api/v1/runs/{id}/profiles and .../profiles/{name}/trace: a local run's profiles as its
trainer left them in its outputs, to the tokens that may read the run, and nothing else of
the filesystem."""

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.core.run_profiles import profile_dir
from crucible.settings import Settings
from tests.conftest import bearer, make_project, make_token, submit
from tests.profile_files import TRACE, leave_profile


@pytest.fixture
def run_id(admin: TestClient) -> int:
    make_project(admin)
    rid = submit(admin)["id"]
    assert isinstance(rid, int)
    return rid


def test_the_profiles_a_local_run_left_are_listed_with_their_summaries(
    admin: TestClient, settings: Settings, run_id: int
) -> None:
    url = f"/api/v1/runs/{run_id}/profiles"
    none_yet = admin.get(url).json()
    assert none_yet["profiles"] == [] and "profile_from_step" in none_yet["message"]

    directory = profile_dir(settings.home, run_id)
    assert directory == settings.home / "runs" / str(run_id) / "outputs" / "profile"
    trace = leave_profile(directory, "rank0-steps3-4")
    leave_profile(directory, "rank1-steps3-4", summary=False)
    leave_profile(directory, "rank0-steps10-12")
    (directory / "rank2-steps3-4.summary.json").write_text("{not json")
    for stray in ("notes.txt", "rank01-steps3-4.trace.json.gz", "rank0-steps3.summary.json"):
        (directory / stray).write_text("not the trainer's")

    listed = admin.get(url)
    assert listed.status_code == 200, listed.text
    body: dict[str, Any] = listed.json()
    assert body["run_id"] == run_id and body["message"] == ""
    profiles = body["profiles"]
    assert [p["name"] for p in profiles] == [
        "rank0-steps3-4",
        "rank1-steps3-4",
        "rank2-steps3-4",
        "rank0-steps10-12",
    ]
    first = profiles[0]
    assert (first["rank"], first["first_step"], first["last_step"]) == (0, 3, 4)
    assert first["trace_bytes"] == trace.stat().st_size
    summary = first["summary"]
    assert summary["annotated"] and summary["timeline"] == "cpu"
    assert summary["top_operators"] == [
        {"name": "aten::mm", "calls": 1, "total_us": 80.0, "share": 1.0}
    ]
    assert {p["phase"]: p["total_us"] for p in summary["phases"]}["compute"] == 100.0
    # A trace without a summary, or a summary that cannot be read, still lists the profile.
    assert profiles[1]["summary"] is None and profiles[1]["trace_bytes"] > 0
    assert profiles[2]["summary"] is None and profiles[2]["trace_bytes"] is None


def test_the_trace_comes_gzipped_for_a_browser_to_unpack(
    admin: TestClient, settings: Settings, run_id: int
) -> None:
    trace = leave_profile(profile_dir(settings.home, run_id), "rank0-steps3-4")
    response = admin.get(f"/api/v1/runs/{run_id}/profiles/rank0-steps3-4/trace")
    assert response.status_code == 200, response.text
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-length"] == str(trace.stat().st_size)  # as stored
    assert response.json() == TRACE  # httpx, like a browser, undoes the encoding


@pytest.mark.parametrize(
    "name",
    [
        "rank0-steps3-5",  # well formed, but no such profile
        "rank0-steps3-4.trace.json.gz",
        "rank0-steps3-4.summary",
        "rank00-steps3-4",
        "rank0-steps0-4",
        "...",
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "rank0-steps3-4%00",
        "rank0-steps3-4%0A",
    ],
)
def test_any_other_name_is_not_found_and_reads_nothing(
    admin: TestClient, settings: Settings, run_id: int, name: str
) -> None:
    leave_profile(profile_dir(settings.home, run_id), "rank0-steps3-4")
    response = admin.get(f"/api/v1/runs/{run_id}/profiles/{name}/trace")
    assert response.status_code == 404, response.text
    if "%2F" not in name:  # a slash never reaches the route: the router's own 404
        detail = response.json()["detail"]
        assert detail.startswith("profile ") and "not found:" in detail, detail
        assert "rank<R>-steps<A>-<B>" in detail or "has no trace" in detail, detail


def test_a_link_in_place_of_a_trace_is_not_followed(
    admin: TestClient, settings: Settings, run_id: int, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(b"not the run's")
    directory = profile_dir(settings.home, run_id)
    directory.mkdir(parents=True)
    (directory / "rank0-steps3-4.trace.json.gz").symlink_to(secret)
    response = admin.get(f"/api/v1/runs/{run_id}/profiles/rank0-steps3-4/trace")
    assert response.status_code == 404 and "has no trace" in response.json()["detail"]


def test_another_projects_token_reads_neither_list_nor_trace(
    admin: TestClient, app: FastAPI, settings: Settings, run_id: int
) -> None:
    leave_profile(profile_dir(settings.home, run_id), "rank0-steps3-4")
    make_project(admin, "other")
    outsider = TestClient(app, headers=bearer(make_token(admin, "other", "admin")))
    viewer = TestClient(app, headers=bearer(make_token(admin, "vision", "viewer")))
    for path in ("profiles", "profiles/rank0-steps3-4/trace"):
        refused = outsider.get(f"/api/v1/runs/{run_id}/{path}")
        # Another project's run answers as a missing one does (core/access.py).
        assert refused.status_code == 404, refused.text
        assert refused.json()["detail"] == f"run {run_id!r} not found"
        assert viewer.get(f"/api/v1/runs/{run_id}/{path}").status_code == 200
    bad_name = outsider.get(f"/api/v1/runs/{run_id}/profiles/..%2E/trace")
    assert bad_name.json()["detail"] == f"run {run_id!r} not found"  # the run is checked first


def test_a_kubernetes_run_says_where_its_profiles_are(
    admin: TestClient, settings: Settings
) -> None:
    make_project(admin)
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "on-k8s"},
        "spec": {"experiment": "exp"},
    }
    run = admin.post(
        "/api/v1/runs", json={"project": "vision", "manifest": manifest, "backend": "kubernetes"}
    ).json()
    # Files at the local path are not this run's: the API never reads them for it.
    leave_profile(profile_dir(settings.home, run["id"]), "rank0-steps3-4")
    listed = admin.get(f"/api/v1/runs/{run['id']}/profiles").json()
    assert listed["profiles"] == [] and "Kubernetes" in listed["message"]
    assert "CRUCIBLE_OUTPUTS_DIR/profile" in listed["message"]
    trace = admin.get(f"/api/v1/runs/{run['id']}/profiles/rank0-steps3-4/trace")
    assert trace.status_code == 404 and "Kubernetes" in trace.json()["detail"]
