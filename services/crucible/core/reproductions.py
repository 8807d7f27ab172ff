"""The submission that reproduces a run, as the dashboard asks for it: the same one
`crucible runs reproduce` builds (`crucible/reproduction.py`), with the code of a local run
checked where the local executor would run it, on this server's machine."""

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core import runs
from crucible.core.access import Principal
from crucible.db.tables import Checkpoint, Project, Run
from crucible.domain.resources import TAG_REPRODUCES
from crucible.reproduction import (
    current_code,
    refuse_deleted_checkpoints,
    reproduction,
    reproduction_name,
)
from crucible.schemas.runs import RunSubmit


def run_reproduction(*, session: Session, principal: Principal, run_id: int) -> RunSubmit:
    """The body to POST to /runs, or CannotReproduce saying why there is none."""
    run = runs.get_run(session=session, principal=principal, run_id=run_id)
    attempts = runs.list_attempts(session=session, principal=principal, run_id=run_id)
    project = session.get_one(Project, run.project_id)
    earlier = session.scalar(
        select(func.count())
        .select_from(Run)
        .where(
            Run.project_id == run.project_id,
            Run.tags[TAG_REPRODUCES].as_string() == str(run.id),
        )
    )
    request = reproduction(
        run,
        attempts,
        project=project.name,
        name=reproduction_name(run.name, (earlier or 0) + 1),
        current_code=current_code(run),
    )

    def deleted(checkpoint_id: int) -> bool:
        checkpoint = session.get(Checkpoint, checkpoint_id)
        return checkpoint is None or checkpoint.deleted_at is not None

    refuse_deleted_checkpoints(run, request, deleted)
    return request
