"""Which parts of the test stack the selected tests use, so that scripts/test starts only those.

scripts/test first collects with its own arguments and this plugin,
`pytest --collect-only -p tests.needs --needs-file=FILE ...`, and reads from FILE the parts
(space-separated, as scripts/test names them) that the tests left after `-m`, `-k` and the
paths carry markers for. A test uses a part only through its marker: a test that reaches a
part without carrying the marker runs against whatever an earlier run left up.
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


def parts_needed(markers_per_test: Iterable[Iterable[str]]) -> set[str]:
    """The parts used by tests carrying these markers (the marker names of each test)."""
    return {
        PART_OF_MARKER[name]
        for names in markers_per_test
        for name in names
        if name in PART_OF_MARKER
    }


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--needs-file",
        metavar="FILE",
        help="write the parts of the test stack that the selected tests use to FILE",
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    path = session.config.getoption("needs_file")
    if path:
        needed = parts_needed({mark.name for mark in item.iter_markers()} for item in session.items)
        Path(path).write_text(" ".join(sorted(needed)) + "\n")
