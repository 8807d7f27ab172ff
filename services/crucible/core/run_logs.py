"""The tail of an attempt's log, for the dashboard's run page.

The local executor writes each attempt's stdout and stderr to a file under CRUCIBLE_HOME
(`LocalExecutor.log_path`); the API of the embedded mode runs on the same machine and reads
it from there. A Kubernetes run's logs are the pods', which `kubectl logs` reads.
"""

from pathlib import Path

from pydantic import Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.runs import load_run
from crucible.db.tables import Attempt
from crucible.domain.enums import Backend, Role
from crucible.domain.errors import NotFound
from crucible.domain.resources import LABEL_RUN
from crucible.schemas.common import PublicModel

MAX_TAIL_BYTES = 1 << 20


class LogTail(PublicModel):
    attempt: int | None = Field(description="The attempt whose log this is; None before any.")
    text: str = Field(description="The last `tail_bytes` of the log, from a line start.")
    size_bytes: int = Field(description="The whole log's size.")
    truncated: bool = Field(description="True when the log is longer than what came back.")
    message: str = Field(description="Why there is no text, and where to look instead.")


def log_path(home: Path, run_id: int, attempt: int) -> Path:
    """Where the local executor writes an attempt's output (LocalExecutor.log_path)."""
    return home / "runs" / str(run_id) / f"attempt-{attempt}.log"


def log_tail(
    *,
    session: Session,
    principal: Principal,
    home: Path,
    run_id: int,
    attempt: int | None,
    tail_bytes: int,
) -> LogTail:
    run = load_run(session, principal, run_id, Role.viewer)
    if attempt is not None and (
        session.scalar(
            select(Attempt.id).where(Attempt.run_id == run.id, Attempt.number == attempt)
        )
        is None
    ):
        # The file is found by number alone: a number the run never had may be another
        # run's log (a deleted run's, under a reused id).
        raise NotFound(f"run {run.id}'s attempt", attempt)
    number = attempt or session.scalar(
        select(func.max(Attempt.number)).where(Attempt.run_id == run.id)
    )
    if number is None:
        return LogTail(
            attempt=None,
            text="",
            size_bytes=0,
            truncated=False,
            message="no attempt has started yet",
        )
    if run.backend != Backend.local:
        where = f"-n {run.k8s_namespace} -l {LABEL_RUN}={run.k8s_name}" if run.k8s_name else ""
        return LogTail(
            attempt=number,
            text="",
            size_bytes=0,
            truncated=False,
            message=f"a Kubernetes run's logs are its pods': kubectl logs {where}".rstrip(),
        )
    path = log_path(home, run.id, number)
    try:
        with path.open("rb") as log:
            size = log.seek(0, 2)
            start = max(0, size - tail_bytes)
            log.seek(start)
            data = log.read()
    except FileNotFoundError:
        return LogTail(
            attempt=number,
            text="",
            size_bytes=0,
            truncated=False,
            # The folder relative to the home: a viewer has no business with server paths.
            message=f"no log for attempt {number} on this machine (none at "
            f"{path.relative_to(home)} under the server's home)",
        )
    if start > 0:
        # Start at a line, not in the middle of one (or of a UTF-8 character).
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline != -1 else data
    return LogTail(
        attempt=number,
        text=data.decode("utf-8", errors="replace"),
        size_bytes=size,
        truncated=start > 0,
        message="",
    )
