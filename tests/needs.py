"""Which parts of the test stack the selected tests use, so that scripts/test starts only those.

scripts/test first collects with its own arguments and this plugin,
`pytest --collect-only -p tests.needs --needs-file=FILE ...`, and reads from FILE, for each
of the two stages it runs, how many of the tests left after `-m`, `-k` and the paths fall
in it and the parts (as scripts/test names them) their markers call for:

    local 620 postgres redis web
    cluster 129 cluster objectstore postgres redis

The `cluster` stage is the tests that use the cluster or the object store, or run the
toolchain built for them (`toolchain`); `local` is the rest. scripts/test runs the local
stage at once, on pytest-xdist workers, and the cluster stage beside it as soon as the
cluster's toolchain and images have built (half an hour on empty caches) and the cluster
is up: `--stack-stage=local|cluster` keeps only that stage's tests. A test
uses a part only through its marker: a test that reaches a part without carrying the
marker runs against whatever an earlier run left up.
"""

from collections.abc import Iterable
from pathlib import Path

import pytest

# The part each marker needs started before pytest runs, and what starts it.
PART_OF_MARKER = {
    "postgres": "postgres",  # scripts/services up
    "redis": "redis",  # scripts/services up
    "k8s": "cluster",  # scripts/cluster up
    "realnode": "cluster",
    "objectstore": "objectstore",  # scripts/objectstore up, after the cluster
    "browser": "web",  # scripts/web deps: web/node_modules and Debian's Chromium
}
ALL_PARTS = frozenset(PART_OF_MARKER.values())
# Parts whose start waits on the toolchain built from Go modules (and, for the real node's
# tests, on the images): the tests using them form the second stage, with those that run
# the toolchain's binaries themselves (marked `toolchain`, e.g. a private S3 server).
CLUSTER_PARTS = frozenset({"cluster", "objectstore"})
TOOLCHAIN_MARKER = "toolchain"
STAGES = ("local", "cluster")


def parts_needed(markers_per_test: Iterable[Iterable[str]]) -> set[str]:
    """The parts used by tests carrying these markers (the marker names of each test)."""
    return {
        PART_OF_MARKER[name]
        for names in markers_per_test
        for name in names
        if name in PART_OF_MARKER
    }


def stage_of(markers: Iterable[str]) -> str:
    """The stage of a test carrying these markers."""
    markers = set(markers)
    if TOOLCHAIN_MARKER in markers or parts_needed([markers]) & CLUSTER_PARTS:
        return "cluster"
    return "local"


def _markers(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--needs-file",
        metavar="FILE",
        help="write each stage's test count and the parts its tests use to FILE",
    )
    parser.addoption(
        "--stack-stage",
        choices=STAGES,
        help="keep only the tests of this stage (local: neither cluster nor object store)",
    )


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has added its markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stage = config.getoption("stack_stage")
    if not stage:
        return
    kept = [item for item in items if stage_of(_markers(item)) == stage]
    left = [item for item in items if stage_of(_markers(item)) != stage]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    path = session.config.getoption("needs_file")
    if not path:
        return
    by_stage: dict[str, list[set[str]]] = {stage: [] for stage in STAGES}
    for item in session.items:
        markers = _markers(item)
        by_stage[stage_of(markers)].append(markers)
    lines = [
        " ".join([stage, str(len(tests)), *sorted(parts_needed(tests))])
        for stage, tests in by_stage.items()
    ]
    Path(path).write_text("\n".join(lines) + "\n")
