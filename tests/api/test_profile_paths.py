"""A local run's profiles are read from its own profile directory only: the run's code
writes its outputs, so a link it leaves anywhere on the way (its outputs, the profile
directory, a summary) is not followed to another run's files."""

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crucible.core.run_profiles import profile_dir
from crucible.settings import Settings
from tests.conftest import make_project, submit
from tests.profile_files import leave_profile

NAME = "rank0-steps3-4"


@pytest.fixture
def runs(admin: TestClient, settings: Settings) -> tuple[int, int]:
    """A run of project vision without profiles, and one of project other with one."""
    make_project(admin, "vision")
    make_project(admin, "other")
    own, theirs = submit(admin, "vision")["id"], submit(admin, "other")["id"]
    assert isinstance(own, int) and isinstance(theirs, int)
    leave_profile(profile_dir(settings.home, theirs), NAME)
    return own, theirs


@pytest.mark.parametrize("linked", ["profile", "outputs"])
def test_a_link_on_the_way_to_the_profiles_is_not_followed(
    admin: TestClient, settings: Settings, runs: tuple[int, int], linked: str
) -> None:
    own, theirs = runs
    outputs = profile_dir(settings.home, own).parent
    if linked == "profile":
        outputs.mkdir(parents=True)
        (outputs / "profile").symlink_to(profile_dir(settings.home, theirs))
    else:
        outputs.parent.mkdir(parents=True, exist_ok=True)
        outputs.symlink_to(profile_dir(settings.home, theirs).parent)
    assert (profile_dir(settings.home, own) / f"{NAME}.trace.json.gz").is_file()  # via the link

    listed = admin.get(f"/api/v1/runs/{own}/profiles")
    assert listed.status_code == 200 and listed.json()["profiles"] == [], listed.text
    trace = admin.get(f"/api/v1/runs/{own}/profiles/{NAME}/trace")
    assert trace.status_code == 404 and "has no trace" in trace.json()["detail"], trace.text
    # The other run's own profile is still served to it.
    assert admin.get(f"/api/v1/runs/{theirs}/profiles/{NAME}/trace").status_code == 200


def test_a_summary_or_trace_linked_to_another_runs_is_not_read(
    admin: TestClient, settings: Settings, runs: tuple[int, int]
) -> None:
    own, theirs = runs
    directory = profile_dir(settings.home, own)
    directory.mkdir(parents=True)
    elsewhere = profile_dir(settings.home, theirs)
    for suffix in (".summary.json", ".trace.json.gz"):
        (directory / f"{NAME}{suffix}").symlink_to(elsewhere / f"{NAME}{suffix}")
    listed = admin.get(f"/api/v1/runs/{own}/profiles").json()["profiles"]
    assert [(p["name"], p["summary"], p["trace_bytes"]) for p in listed] == [(NAME, None, None)]
    assert admin.get(f"/api/v1/runs/{own}/profiles/{NAME}/trace").status_code == 404


def test_a_fifo_in_place_of_a_trace_is_not_waited_on(
    admin: TestClient, settings: Settings, runs: tuple[int, int]
) -> None:
    own, _ = runs
    directory = profile_dir(settings.home, own)
    directory.mkdir(parents=True)
    os.mkfifo(directory / f"{NAME}.trace.json.gz")
    trace = admin.get(f"/api/v1/runs/{own}/profiles/{NAME}/trace")
    assert trace.status_code == 404, trace.text


def test_links_above_the_runs_directory_are_the_operators_and_followed(
    admin: TestClient, settings: Settings, tmp_path: Path
) -> None:
    # home/runs may be a link to a larger disk: only what a run writes is distrusted.
    make_project(admin, "vision")
    own = submit(admin, "vision")["id"]
    assert isinstance(own, int)
    runs_dir = settings.home / "runs"
    moved = tmp_path / "bigger-disk"
    if runs_dir.exists():
        runs_dir.rename(moved)
    else:
        moved.mkdir()
        runs_dir.parent.mkdir(parents=True, exist_ok=True)
    runs_dir.symlink_to(moved)
    leave_profile(profile_dir(settings.home, own), NAME)
    assert admin.get(f"/api/v1/runs/{own}/profiles/{NAME}/trace").status_code == 200
