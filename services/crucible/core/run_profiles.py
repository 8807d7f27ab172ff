"""A run's profiles (`config.train.profile_from_step`, or asked of the running run:
`profile_requests.py`), for the API and the CLI.

The trainer writes each rank's profile into the run's outputs
(`domain/profile_files.py`): a kernel table, a gzipped trace and the trace's summary. In
the embedded mode the run's process wrote them on this machine, under
`$CRUCIBLE_HOME/runs/<run>/outputs/profile`, and the API reads them from there, as it reads
a local run's log (`run_logs.py`). A Kubernetes run's outputs are on its pods' volume,
which the API does not mount: it says where to look instead.

Only the default outputs directory is read, not a CRUCIBLE_OUTPUTS_DIR that a spec's `env`
may set: that would let a run name another run's directory and read its profiles.
"""

import logging
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.orm import Session

from crucible.core import profile_requests
from crucible.core.access import Principal
from crucible.core.runs import load_run
from crucible.db.tables import Run
from crucible.domain.contract import default_outputs_dir
from crucible.domain.enums import Backend, Role
from crucible.domain.errors import NotFound
from crucible.domain.profile_files import (
    PROFILE_DIR,
    SUMMARY_SUFFIX,
    TRACE_SUFFIX,
    ProfileName,
    parse_profile_name,
)
from crucible.schemas.profiles import ProfilePublic, ProfileSummary, RunProfiles

log = logging.getLogger(__name__)


class ProfileNotFound(NotFound):
    """NotFound with the reason, so that a client knows whether to fix the name or look
    elsewhere."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__("profile", name)
        self.args = (f"{self.args[0]}: {reason}",)


def profile_dir(home: Path, run_id: int) -> Path:
    """Where a local run's trainer writes its profiles."""
    return default_outputs_dir(home, run_id) / PROFILE_DIR


def list_profiles(
    *, session: Session, principal: Principal, home: Path, run_id: int
) -> RunProfiles:
    run = load_run(session, principal, run_id, Role.viewer)
    requests = profile_requests.list_requests(session, run.id)
    if run.backend != Backend.local:
        return RunProfiles(
            run_id=run.id, profiles=[], message=_kubernetes_message(run), requests=requests
        )
    directory = profile_dir(home, run.id)
    names = _profile_names(directory)
    if not names:
        return RunProfiles(
            run_id=run.id,
            profiles=[],
            message=f"no profiles on this machine ({directory}); set "
            "config.train.profile_from_step, or run `crucible runs profile` on a running "
            "run, to record some",
            requests=requests,
        )
    return RunProfiles(
        run_id=run.id,
        profiles=[_profile(directory, name) for name in names],
        message="",
        requests=requests,
    )


def trace_path(
    *, session: Session, principal: Principal, home: Path, run_id: int, name: str
) -> Path:
    """The gzipped trace of profile `name`, once the principal may read the run."""
    run = load_run(session, principal, run_id, Role.viewer)
    if parse_profile_name(name) is None:
        # Checked before the name goes near a path: only digits and fixed text get there.
        raise ProfileNotFound(name, "a profile's name is rank<R>-steps<A>-<B>, e.g. rank0-steps3-5")
    if run.backend != Backend.local:
        raise ProfileNotFound(name, _kubernetes_message(run))
    path = profile_dir(home, run.id) / f"{name}{TRACE_SUFFIX}"
    # The run's own code writes this directory: a link there could point anywhere.
    if path.is_symlink() or not path.is_file():
        raise ProfileNotFound(name, f"run {run.id} has no trace at {path}")
    return path


def _profile_names(directory: Path) -> list[ProfileName]:
    """The profiles of which a trace or a summary is in `directory`; other files are not
    the trainer's and are left out."""
    found: set[ProfileName] = set()
    try:
        files = list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    for path in files:
        for suffix in (TRACE_SUFFIX, SUMMARY_SUFFIX):
            if path.name.endswith(suffix):
                parsed = parse_profile_name(path.name.removesuffix(suffix))
                if parsed is not None:
                    found.add(parsed)
    return sorted(found, key=lambda p: (p.first_step, p.last_step, p.rank))


def _profile(directory: Path, name: ProfileName) -> ProfilePublic:
    trace = directory / f"{name}{TRACE_SUFFIX}"
    return ProfilePublic(
        name=str(name),
        rank=name.rank,
        first_step=name.first_step,
        last_step=name.last_step,
        summary=_read_summary(directory / f"{name}{SUMMARY_SUFFIX}"),
        trace_bytes=_size(trace),
    )


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _read_summary(path: Path) -> ProfileSummary | None:
    try:
        return ProfileSummary.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        # One unreadable summary (half written, or from another version) should not hide
        # the run's other profiles.
        log.warning("profile summary %s unreadable: %s", path, exc)
        return None


def _kubernetes_message(run: Run) -> str:
    pods = f" (kubectl get pods -n {run.k8s_namespace})" if run.k8s_namespace else ""
    return (
        f"a Kubernetes run writes its profiles to its pods' outputs, CRUCIBLE_OUTPUTS_DIR/"
        f"{PROFILE_DIR}{pods}, which this API does not read; with a storage claim they are "
        f"under <storage path>/runs/{run.id}/outputs/{PROFILE_DIR}"
    )
