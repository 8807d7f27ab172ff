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

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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
    with _opened_profile_dir(home, run.id) as directory_fd:
        names = _profile_names(directory_fd)
        profiles = [_profile(directory_fd, name) for name in names]
    if not names:
        return RunProfiles(
            run_id=run.id,
            profiles=[],
            message=f"no profiles on this machine (none in {directory.relative_to(home)} under "
            "the server's home); set config.train.profile_from_step, or run `crucible runs "
            "profile` on a running run, to record some",
            requests=requests,
        )
    return RunProfiles(
        run_id=run.id,
        profiles=profiles,
        message="",
        requests=requests,
    )


def open_trace(
    *, session: Session, principal: Principal, home: Path, run_id: int, name: str
) -> BinaryIO:
    """The gzipped trace of profile `name`, opened, once the principal may read the run.
    Opened rather than named: the run's own code writes its outputs, and a link it puts in
    place of the file between a check and an open would be followed."""
    run = load_run(session, principal, run_id, Role.viewer)
    if parse_profile_name(name) is None:
        # Checked before the name goes near a path: only digits and fixed text get there.
        raise ProfileNotFound(name, "a profile's name is rank<R>-steps<A>-<B>, e.g. rank0-steps3-5")
    if run.backend != Backend.local:
        raise ProfileNotFound(name, _kubernetes_message(run))
    file_name = f"{name}{TRACE_SUFFIX}"
    with _opened_profile_dir(home, run.id) as directory_fd:
        trace = _open_file(directory_fd, file_name)
    if trace is None:
        path = profile_dir(home, run.id) / file_name
        raise ProfileNotFound(name, f"run {run.id} has no trace at {path.relative_to(home)}")
    return trace


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO in place of a file would otherwise hold the open until a writer came.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextlib.contextmanager
def _opened_profile_dir(home: Path, run_id: int) -> Iterator[int | None]:
    """A descriptor of the run's profile directory, reached from `home/runs` one name at a
    time (`<run>`, `outputs`, `profile`) without following a link at any of them, so that
    what is read from it is inside it whatever the run left there; None when any is not a
    plain directory. `home/runs` itself is the control plane's, and may be a link."""
    relative = profile_dir(home, run_id).relative_to(home / "runs")
    try:
        fd = os.open(home / "runs", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        for part in relative.parts:
            inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:  # missing, a link (ELOOP), or not a directory
        os.close(fd)
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _open_file(directory_fd: int | None, name: str) -> BinaryIO | None:
    """The regular file `name` (one name, no `/`) in `directory_fd`, not through a link."""
    if directory_fd is None or "/" in name or name in ("", ".", ".."):
        return None
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=directory_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _profile_names(directory_fd: int | None) -> list[ProfileName]:
    """The profiles of which a trace or a summary is in the directory; other files are not
    the trainer's and are left out."""
    if directory_fd is None:
        return []
    found: set[ProfileName] = set()
    for file_name in os.listdir(directory_fd):
        for suffix in (TRACE_SUFFIX, SUMMARY_SUFFIX):
            if file_name.endswith(suffix):
                parsed = parse_profile_name(file_name.removesuffix(suffix))
                if parsed is not None:
                    found.add(parsed)
    return sorted(found, key=lambda p: (p.first_step, p.last_step, p.rank))


def _profile(directory_fd: int | None, name: ProfileName) -> ProfilePublic:
    return ProfilePublic(
        name=str(name),
        rank=name.rank,
        first_step=name.first_step,
        last_step=name.last_step,
        summary=_read_summary(directory_fd, f"{name}{SUMMARY_SUFFIX}"),
        trace_bytes=_size(directory_fd, f"{name}{TRACE_SUFFIX}"),
    )


def _size(directory_fd: int | None, name: str) -> int | None:
    if directory_fd is None:
        return None
    try:
        found = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def _read_summary(directory_fd: int | None, name: str) -> ProfileSummary | None:
    summary = _open_file(directory_fd, name)
    if summary is None:
        return None
    try:
        with summary:
            return ProfileSummary.model_validate_json(summary.read())
    except (OSError, ValidationError) as exc:
        # One unreadable summary (half written, or from another version) should not hide
        # the run's other profiles.
        log.warning("profile summary %s of a run unreadable: %s", name, exc)
        return None


def _kubernetes_message(run: Run) -> str:
    pods = f" (kubectl get pods -n {run.k8s_namespace})" if run.k8s_namespace else ""
    return (
        f"a Kubernetes run writes its profiles to its pods' outputs, CRUCIBLE_OUTPUTS_DIR/"
        f"{PROFILE_DIR}{pods}, which this API does not read; with a storage claim they are "
        f"under <storage path>/runs/{run.id}/outputs/{PROFILE_DIR}"
    )
