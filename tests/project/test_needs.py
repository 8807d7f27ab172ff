"""tests/needs.py, which tells scripts/test what to start: the parts of the test stack that the
selected tests' markers call for, nothing for tests that carry none, and everything for the
whole suite (as .ci/run runs it); and which of its two stages each test runs in."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.needs import ALL_PARTS, PART_OF_MARKER, parts_needed, stage_of

REPO = Path(__file__).resolve().parents[2]


def test_each_marker_brings_its_part_and_other_markers_none() -> None:
    assert parts_needed([{"postgres"}, {"k8s", "realnode", "slow"}]) == {"postgres", "cluster"}
    assert parts_needed([{"redis", "postgres"}, {"objectstore"}, {"browser"}]) == {
        "redis",
        "postgres",
        "objectstore",
        "web",
    }
    assert parts_needed([{"slow", "chaos"}, set()]) == set()
    assert parts_needed([]) == set()


def test_every_marker_that_brings_a_part_is_one_pytest_knows() -> None:
    # A misspelt marker here would never start its part; --strict-markers refuses unknown
    # ones on tests, so the two lists must agree.
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    registered = {line.split(":")[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(PART_OF_MARKER) <= registered


def test_a_test_using_the_cluster_or_the_object_store_runs_in_the_cluster_stage() -> None:
    assert stage_of({"k8s"}) == "cluster"
    assert stage_of({"objectstore", "postgres"}) == "cluster"
    assert stage_of({"realnode", "slow"}) == "cluster"
    assert stage_of({"toolchain", "chaos"}) == "cluster"
    assert stage_of({"postgres", "redis", "browser", "chaos"}) == "local"
    assert stage_of(set()) == "local"


def collect(tmp_path: Path, *args: str) -> tuple[dict[str, tuple[int, set[str]]], str]:
    """scripts/test's collection for `scripts/test ARGS`, as it runs it: each stage's test
    count and parts, and pytest's output."""
    needs_file = tmp_path / "needs"
    collect = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.needs"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *collect, f"--needs-file={needs_file}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=480,  # 170 s seen with the suite's two workers and the cluster beside it
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stages = {}
    for line in needs_file.read_text().splitlines():
        stage, count, *parts = line.split()
        stages[stage] = (int(count), set(parts))
    assert set(stages) == {"local", "cluster"}
    return stages, done.stdout


def collected_needs(tmp_path: Path, *args: str) -> set[str]:
    """What scripts/test would start for `scripts/test ARGS`."""
    stages, _ = collect(tmp_path, *args)
    return stages["local"][1] | stages["cluster"][1]


@pytest.mark.slow
@pytest.mark.timeout(600)  # its collections: 170 s seen under the whole suite
def test_the_whole_suite_needs_every_part(tmp_path: Path) -> None:
    assert collected_needs(tmp_path) == ALL_PARTS


@pytest.mark.slow
@pytest.mark.timeout(600)  # its collections: 170 s seen under the whole suite
def test_deselected_markers_start_nothing_for_them_and_the_rest_still_starts(
    tmp_path: Path,
) -> None:
    needs = collected_needs(tmp_path, "-m", "not postgres and not k8s")
    assert needs == ALL_PARTS - {"postgres", "cluster"}


@pytest.mark.slow
@pytest.mark.timeout(600)  # its collections: 170 s seen under the whole suite
def test_tests_that_use_no_part_need_nothing(tmp_path: Path) -> None:
    assert collected_needs(tmp_path, "tests/api/test_downsample.py") == set()


@pytest.mark.slow
@pytest.mark.timeout(600)  # its collections: 170 s seen under the whole suite
def test_a_test_taking_s3_needs_the_object_store(tmp_path: Path) -> None:
    # marked by tests/conftest.py, not in the module
    assert collected_needs(tmp_path, "tests/sdk/test_object_storage.py") == {"objectstore"}


@pytest.mark.slow
@pytest.mark.timeout(600)  # its collections: 170 s seen under the whole suite
def test_each_stage_keeps_only_its_own_tests(tmp_path: Path) -> None:
    paths = ["tests/sdk/test_object_storage.py", "tests/api/test_downsample.py"]
    kept, totals = {}, set()
    for stage, ours, theirs in [
        ("local", "test_downsample.py::", "test_object_storage.py::"),
        ("cluster", "test_object_storage.py::", "test_downsample.py::"),
    ]:
        stages, listed = collect(tmp_path, *paths, f"--stack-stage={stage}")
        assert ours in listed and theirs not in listed
        other = "cluster" if stage == "local" else "local"
        assert stages[other] == (0, set())
        selected, total = re.search(r"(\d+)/(\d+) tests collected", listed).groups()
        assert int(selected) == stages[stage][0] > 0
        kept[stage] = int(selected)
        totals.add(int(total))
    assert totals == {kept["local"] + kept["cluster"]}
