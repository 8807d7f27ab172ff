"""What the dashboard's runs table shows beside each run: its goodput and its best eval.

One call per table page instead of two per row: a page of 100 runs costs four queries.
"""

import re
from collections import defaultdict
from typing import Annotated, Literal

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal

# The goodput arithmetic is the one GET /runs/{id}/goodput uses; computed for many runs at once.
from crucible.core.goodput import _for_runs
from crucible.db.tables import Checkpoint, EvalResult, Run
from crucible.domain.json_values import MAX_INT64
from crucible.schemas.common import PublicModel

MAX_RUNS = 200
RunId = Annotated[int, Field(ge=1, le=MAX_INT64)]
# Without a ranking in the spec, a metric named like these is better low; any other, high.
_LOWER_IS_BETTER = re.compile(r"loss|error|perplexity|ppl|wer|cer|regret", re.IGNORECASE)


class BestEval(PublicModel):
    suite: str
    metric: str
    mode: Literal["max", "min"]
    value: float
    step: int
    checkpoint_id: int
    ranked_by: Literal["spec", "name"] = Field(
        description="`spec`: the run's `checkpoints.best`; `name`: the first metric its evals "
        "report, low-is-better when named like a loss or error."
    )


class RunSummary(PublicModel):
    run_id: int
    goodput: float | None = Field(description="Productive over allocated device time.")
    best_eval: BestEval | None = Field(description="None until an eval scored a checkpoint.")


def run_summaries(
    *, session: Session, principal: Principal, run_ids: list[int]
) -> list[RunSummary]:
    """Summaries of the given runs the caller may see, in the order asked; others are left
    out, as a list endpoint leaves out another project's runs."""
    found = {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))}
    runs = [
        found[i]
        for i in dict.fromkeys(run_ids)
        if i in found and principal.can_see(found[i].project_id)
    ]
    goodputs = _for_runs(session, runs)
    scores: dict[int, list[tuple[str, dict[str, float], int, int]]] = defaultdict(list)
    for run_id, suite, values, step, checkpoint_id in session.execute(
        select(
            Checkpoint.run_id, EvalResult.suite, EvalResult.scores, Checkpoint.step, Checkpoint.id
        )
        .join(EvalResult, EvalResult.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.run_id.in_([run.id for run in runs]))
        .order_by(Checkpoint.step, EvalResult.id)
    ):
        scores[run_id].append((suite, values, step, checkpoint_id))
    return [
        RunSummary(
            run_id=run.id,
            goodput=goodputs[run.id].goodput,
            best_eval=_best(scores[run.id], _ranking(run)),
        )
        for run in runs
    ]


def _ranking(run: Run) -> tuple[str, str] | None:
    """(mode, metric) from the spec's `checkpoints.best`, e.g. `max:accuracy`."""
    spec = run.manifest.get("spec") or {}
    best = (spec.get("checkpoints") or {}).get("best")
    if isinstance(best, str) and ":" in best:
        mode, metric = best.split(":", 1)
        return mode, metric
    return None


def _best(
    results: list[tuple[str, dict[str, float], int, int]], ranking: tuple[str, str] | None
) -> BestEval | None:
    if not results:
        return None
    if ranking is not None:
        mode, metric = ranking
        ranked_by: Literal["spec", "name"] = "spec"
    else:
        metric = min(name for _, values, _, _ in results for name in values)
        mode = "min" if _LOWER_IS_BETTER.search(metric) else "max"
        ranked_by = "name"
    candidates = [
        (values[metric], step, suite, cid)
        for suite, values, step, cid in results
        if metric in values
    ]
    if not candidates:
        return None
    sign = 1 if mode == "max" else -1
    # Ties go to the later step, as checkpoints.best_live_checkpoint ranks them.
    value, step, suite, checkpoint_id = max(candidates, key=lambda c: (sign * c[0], c[1]))
    return BestEval(
        suite=suite,
        metric=metric,
        mode="max" if mode == "max" else "min",
        value=value,
        step=step,
        checkpoint_id=checkpoint_id,
        ranked_by=ranked_by,
    )
