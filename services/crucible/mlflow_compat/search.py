"""search-runs: the runs of some experiments, filtered and ordered as MLflow's syntax says.

Evaluated in Python over the runs of the named experiments (each clause on params, tags,
the latest metric values and attributes), which keeps MLflow's semantics (a run without the
key never matches) without one SQL dialect per database; docs/mlflow.md gives the sizes."""

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.db.tables import Run
from crucible.mlflow_compat import experiments, runs
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.entities import params_of, run_info
from crucible.mlflow_compat.filters import (
    Clause,
    OrderTerm,
    like_matcher,
    parse_filter,
    parse_order_by,
)
from crucible.mlflow_compat.limits import invalid_filter
from crucible.mlflow_compat.pages import page_of

MAX_RESULTS = 50_000

_NUMERIC = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


class _View:
    """What the clauses read of one run."""

    def __init__(self, run: Run, metrics: dict[str, dict[str, Any]]) -> None:
        self.run = run
        self.metrics = {k: m["value"] for k, m in metrics.items()}
        self.params = params_of(run)
        self.tags = {k: str(v) for k, v in run.tags.items()}
        self.info = run_info(run)
        self.info["created"] = self.info["start_time"]

    def value(self, entity: str, key: str) -> Any:
        if entity == "metric":
            return self.metrics.get(key)
        if entity == "param":
            return self.params.get(key)
        if entity == "tag":
            return self.tags.get(key)
        return self.info.get(key)


def search(
    session: Session,
    caller: Caller,
    *,
    experiment_ids: list[str],
    filter_text: str,
    view_type: str,
    max_results: int,
    order_by: list[str],
    page_token: str,
) -> dict[str, Any]:
    clauses = parse_filter(filter_text)
    order = parse_order_by(order_by)
    if any(c.entity == "dataset" for c in clauses):
        raise invalid_filter(filter_text, "Crucible does not filter runs by dataset yet")
    experiment_rows = experiments.readable(session, caller, experiment_ids)
    if not experiment_rows:
        return {"runs": []}
    rows = list(
        session.scalars(select(Run).where(Run.experiment_id.in_([e.id for e in experiment_rows])))
    )
    rows = [r for r in rows if experiments.in_view(r.deleted_at is not None, view_type)]
    metrics = runs.latest_metrics(session, [r.id for r in rows])
    views = [_View(r, metrics[r.id]) for r in rows]
    tests = [_test(c) for c in clauses]
    views = [v for v in views if all(test(v) for test in tests)]
    views = _ordered(views, order)
    page, token = page_of(views, max_results=max_results, page_token=page_token, most=MAX_RESULTS)
    answer: dict[str, Any] = {
        "runs": [runs.run_json(session, v.run, metrics[v.run.id]) for v in page]
    }
    if token:
        answer["next_page_token"] = token
    return answer


def _test(clause: Clause) -> Callable[[_View], bool]:
    comparator, expected = clause.comparator, clause.value
    like = (
        like_matcher(expected, ignore_case=comparator == "ILIKE")
        if comparator in ("LIKE", "ILIKE") and isinstance(expected, str)
        else None
    )

    def test(view: _View) -> bool:
        actual = view.value(clause.entity, clause.key)
        if comparator == "IS NULL":
            return actual is None
        if comparator == "IS NOT NULL":
            return actual is not None
        if actual is None:
            return False
        if isinstance(expected, float):
            return bool(_NUMERIC[comparator](float(actual), expected))
        if comparator == "IN":
            return str(actual) in (expected or ())
        if comparator == "NOT IN":
            return str(actual) not in (expected or ())
        if like is not None:
            return like(str(actual))
        return bool(_NUMERIC[comparator](str(actual), expected))

    return test


def _ordered(views: list[_View], order: list[OrderTerm]) -> list[_View]:
    """MLflow's default, newest first; each term then sorts stably, the last term first.
    Runs without the key go last, whichever the direction."""
    views = sorted(views, key=lambda v: (v.info["start_time"], v.run.id), reverse=True)
    for term in reversed(order):
        present = [v for v in views if v.value(term.entity, term.key) is not None]
        absent = [v for v in views if v.value(term.entity, term.key) is None]
        present.sort(key=lambda v: v.value(term.entity, term.key), reverse=not term.ascending)
        views = present + absent
    return views
