"""An example YAML run as its comment says: `crucible submit` while `crucible up` runs, until
every run it makes (those submitted and the evals they trigger) has ended, each Succeeded."""

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from crucible.schemas.runs import RunPublic
from tests.servers import crucible, local_server


@dataclass(frozen=True)
class ExampleRuns:
    api: CrucibleClient
    by_name: dict[str, RunPublic]


@contextmanager
def example_succeeds(
    tmp_path: Path,
    example: Path,
    *,
    runs: int,
    timeout: float,
    submit_args: Sequence[str] = (),
    cwd: Path | None = None,
) -> Iterator[ExampleRuns]:
    """Submit `example` (with `submit_args`, from `cwd`) to a fresh `crucible up`, wait up to
    `timeout` s for at least `runs` runs, all ended, and check each Succeeded; yields the API
    and the runs by name."""
    with local_server(tmp_path, command="up") as server:
        submitted = crucible(server.env, "submit", str(example), *submit_args, cwd=cwd)
        assert submitted.returncode == 0, submitted.stderr
        with CrucibleClient(server.url, server.token) as api:
            deadline = time.monotonic() + timeout
            while True:
                found = api.list_runs(project="default", limit=100).items
                if len(found) >= runs and all(r.phase.is_terminal for r in found):
                    break
                assert time.monotonic() < deadline, [(r.name, r.phase, r.message) for r in found]
                time.sleep(1)
            report = [(r.name, r.phase, r.reason, r.message) for r in found]
            assert all(r.phase == Phase.Succeeded for r in found), (
                report,
                server.log.read_text()[-3000:],
            )
            yield ExampleRuns(api, {r.name: r for r in found})
