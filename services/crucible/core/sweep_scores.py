"""Where a sweep's metric comes from when it is an eval score (`metric.evalSuite`): the
suite's score of each trial's checkpoints, one point per checkpoint at its step, read from
the eval results the eval trigger's runs record.

A trial's last score comes after its run has ended: the final checkpoint is registered,
its eval run is submitted by the trigger (through the outbox) and then runs. So a trial
counts as scored only once every live checkpoint of it has the suite's result, or has an
eval run of its own that has ended without one (a failed eval gives no point, and waits
for nothing).
"""

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.db.tables import Checkpoint, EvalResult, Run
from crucible.domain.enums import Phase, RunKind
from crucible.domain.resources import TAG_CHECKPOINT, TAG_EVALUATES_RUN

Points = list[tuple[int, float]]


def eval_points(session: Session, run_ids: list[int], suite: str, score: str) -> dict[int, Points]:
    """Run id -> (checkpoint step, score) of each of its checkpoints the suite scored, by
    step; checkpoints deleted by retention keep their scores here, as a logged metric keeps
    its points."""
    value = EvalResult.scores[score].as_float()
    rows = session.execute(
        select(Checkpoint.run_id, Checkpoint.step, value)
        .join(EvalResult, EvalResult.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.run_id.in_(run_ids), EvalResult.suite == suite, value.is_not(None))
        .order_by(Checkpoint.run_id, Checkpoint.step, EvalResult.id)
    ).all()
    points: dict[int, dict[int, float]] = defaultdict(dict)
    for run_id, step, found in rows:
        points[run_id][step] = found  # a checkpoint scored twice: the later result
    return {run_id: sorted(by_step.items()) for run_id, by_step in points.items()}


def awaiting_scores(session: Session, run_ids: list[int], suite: str) -> set[int]:
    """The runs with a live checkpoint that the suite has not scored and whose eval has not
    ended (or not been submitted yet)."""
    if not run_ids:
        return set()
    checkpoints = session.execute(
        select(Checkpoint.id, Checkpoint.run_id).where(
            Checkpoint.run_id.in_(run_ids), Checkpoint.deleted_at.is_(None)
        )
    ).all()
    scored = set(
        session.scalars(
            select(EvalResult.checkpoint_id).where(
                EvalResult.checkpoint_id.in_([c for c, _ in checkpoints]),
                EvalResult.suite == suite,
            )
        )
    )
    # An eval run counts for a checkpoint only when it is of the checkpoint's project and
    # names the run that wrote it: the tags are the trigger's, but a row is not a proof.
    project_of = {
        str(run_id): project_id
        for run_id, project_id in session.execute(
            select(Run.id, Run.project_id).where(Run.id.in_(run_ids))
        )
    }
    ended_evals = {
        (evaluated, checkpoint)
        for evaluated, checkpoint, project_id, manifest in session.execute(
            select(
                Run.tags[TAG_EVALUATES_RUN].as_string(),
                Run.tags[TAG_CHECKPOINT].as_string(),
                Run.project_id,
                Run.manifest,
            ).where(
                Run.kind == RunKind.eval.value,
                Run.project_id.in_(set(project_of.values())),
                Run.tags[TAG_EVALUATES_RUN].as_string().in_([str(r) for r in run_ids]),
                Run.phase.in_([p.value for p in Phase if p.is_terminal]),
            )
        )
        if manifest.get("spec", {}).get("suite") == suite and project_of[evaluated] == project_id
    }
    return {
        run_id
        for checkpoint_id, run_id in checkpoints
        if checkpoint_id not in scored and (str(run_id), str(checkpoint_id)) not in ended_evals
    }
