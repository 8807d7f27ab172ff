"""Sweeps as the API keeps them: submitted whole (every trial's config checked before any
runs), listed, shown with their trials, cancelled. Starting and stopping trials is the
workers' controller's (`core/sweep_controller.py`)."""

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lookups import get_or_404, listed_project_id, project_by_name
from crucible.core.pagination import paginate
from crucible.core.runs import require_project_namespace
from crucible.core.sweep_scores import Points, eval_points
from crucible.core.transitions import move_run
from crucible.db.tables import MetricSeries, Run, Sweep, SweepTrial
from crucible.domain import reasons
from crucible.domain.digests import spec_digest
from crucible.domain.enums import Backend, Phase, Role
from crucible.domain.errors import Conflict, InvalidInput
from crucible.domain.specs import SweepManifest
from crucible.schemas.sweeps import SweepPublic, SweepsPublic, SweepSubmit, SweepTrialPublic
from crucible.sweeps.plan import SweepPlan, checked_plan, parse_plan
from crucible.sweeps.space import SearchSpaceError
from crucible.sweeps.trials import MAX_SWEEP_NAME


def plan_of(manifest: SweepManifest) -> SweepPlan:
    """The sweep's plan, its settings checked whole and every trial's point applied to the
    run's config as the job will check it; InvalidInput naming the bad path and value."""
    settings = manifest.spec.plan_settings()
    try:
        return checked_plan(settings, manifest.spec.run.config or {})
    except SearchSpaceError as error:
        raise InvalidInput("manifest.spec", settings, str(error), location="body") from None


def check_sweep(manifest: SweepManifest) -> SweepPlan:
    """What a sweep must pass beyond its schema, before anything is written: a name its
    trials' names fit, and its plan (every trial's config) as `plan_of` checks it."""
    name = manifest.metadata.name
    if len(name) > MAX_SWEEP_NAME:
        raise InvalidInput(
            "manifest.metadata.name",
            name,
            f"a sweep's name is at most {MAX_SWEEP_NAME} characters: its trials are named "
            "<sweep>-<3 digits>, which a run name must fit",
            location="body",
        )
    plan = plan_of(manifest)
    if plan.eval_suite is not None:
        check_eval_metric(manifest, plan.eval_suite)
    return plan


def check_eval_metric(manifest: SweepManifest, suite: str) -> None:
    """A sweep judged by an eval score needs the trials' checkpoints scored by that suite,
    and ASHA's first rung no earlier than the first checkpoint."""
    run = manifest.spec.run
    suites = [policy.suite for policy in run.evals]
    if suite not in suites:
        raise InvalidInput(
            "manifest.spec.metric.evalSuite",
            suite,
            f"the trials' checkpoints are scored only by the suites in spec.run.evals "
            f"({', '.join(suites) or 'none'}); add `- suite: {suite}` there",
            location="body",
        )
    stopping = manifest.spec.early_stopping
    every = run.checkpoints.every_steps
    if stopping is not None and stopping.min_steps < every:
        raise InvalidInput(
            "manifest.spec.earlyStopping.minSteps",
            stopping.min_steps,
            f"ASHA on an eval score judges trials at their checkpoints, every {every} steps "
            "(spec.run.checkpoints.everySteps): a rung below that would be judged on a later "
            "checkpoint; make minSteps at least everySteps",
            location="body",
        )


def submit_sweep(*, session: Session, principal: Principal, sweep_in: SweepSubmit) -> SweepPublic:
    """Create a sweep, or return the existing one when the same submission is repeated."""
    project = project_by_name(session, sweep_in.project)
    principal.require(project.id, Role.editor, entity="project", key=sweep_in.project)
    manifest = sweep_in.manifest
    name = manifest.metadata.name
    if sweep_in.backend is Backend.kubernetes:
        require_project_namespace(project, manifest.metadata.namespace)
    check_sweep(manifest)
    manifest_json = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    digest = spec_digest(manifest_json["spec"])
    existing = session.scalar(
        select(Sweep).where(Sweep.project_id == project.id, Sweep.name == name)
    )
    if existing is not None:
        if existing.spec_digest == digest and existing.backend == sweep_in.backend.value:
            if sweep_in.k8s_uid is not None and existing.k8s_uid is None:
                existing.k8s_uid = sweep_in.k8s_uid
            return sweep_public(session, existing, with_trials=True)
        raise Conflict(
            f"a sweep named {name!r} already exists in project {project.name!r} with a "
            "different spec or backend; pick another name"
        )
    sweep = Sweep(
        project_id=project.id,
        name=name,
        backend=sweep_in.backend.value,
        manifest=manifest_json,
        spec_digest=digest,
        code=None if sweep_in.code is None else sweep_in.code.model_dump(mode="json"),
        phase=Phase.Running.value,
        message="",
        state={},
        k8s_uid=sweep_in.k8s_uid,
    )
    session.add(sweep)
    session.flush()
    return sweep_public(session, sweep, with_trials=True)


def list_sweeps(
    *, session: Session, principal: Principal, project: str | None, cursor: str | None, limit: int
) -> SweepsPublic:
    """The sweeps the caller may see, newest first, without their trials."""
    query = select(Sweep)
    if (project_id := listed_project_id(session, principal, project)) is not None:
        query = query.where(Sweep.project_id == project_id)
    page = paginate(
        session,
        query,
        sort=Sweep.created_at,
        id_column=Sweep.id,
        descending=True,
        cursor=cursor,
        limit=limit,
        to_public=lambda row: row,
    )
    items = [sweep_public(session, row, with_trials=False) for row in page.items]
    return SweepsPublic(items=items, next_cursor=page.next_cursor)


def get_sweep(*, session: Session, principal: Principal, sweep_id: int) -> SweepPublic:
    sweep = load_sweep(session, principal, sweep_id, Role.viewer)
    return sweep_public(session, sweep, with_trials=True)


def cancel_sweep(*, session: Session, principal: Principal, sweep_id: int) -> SweepPublic:
    """End the sweep: no trial starts any more, and the running ones are cancelled."""
    sweep = load_sweep(session, principal, sweep_id, Role.editor)
    if not Phase(sweep.phase).is_terminal:
        cancel_trials(session, sweep, f"sweep {sweep.name} was cancelled")
        end_sweep(sweep, Phase.Cancelled, "cancelled by user")
    return sweep_public(session, sweep, with_trials=True)


def cancel_trials(session: Session, sweep: Sweep, message: str) -> None:
    """Cancel the sweep's trials that have not ended."""
    query = select(Run).join(SweepTrial, SweepTrial.run_id == Run.id)
    for run in session.scalars(query.where(SweepTrial.sweep_id == sweep.id)):
        if not Phase(run.phase).is_terminal:
            move_run(session, run, Phase.Cancelled, reasons.REASON_CANCELLED_BY_USER, message)


def load_sweep(session: Session, principal: Principal, sweep_id: int, role: Role) -> Sweep:
    sweep = get_or_404(session, Sweep, sweep_id, "sweep")
    principal.require(sweep.project_id, role, entity="sweep", key=sweep_id)
    return sweep


def end_sweep(sweep: Sweep, phase: Phase, message: str) -> None:
    sweep.phase, sweep.message = phase.value, message
    sweep.finished_at = datetime.now(UTC)


def sweep_public(session: Session, sweep: Sweep, *, with_trials: bool) -> SweepPublic:
    manifest = SweepManifest.model_validate(sweep.manifest)
    plan = parse_plan(manifest.spec.plan_settings())
    trials = trial_publics(session, sweep, plan) if with_trials else []
    return SweepPublic.model_validate(
        {
            **{c: getattr(sweep, c) for c in _COLUMNS},
            "metric": plan.metric,
            "goal": plan.goal,
            "budget": plan.trials,
            "trials": trials,
        }
    )


TrialRow = tuple[SweepTrial, Run, int | None, float | None]


def started_trials(session: Session, sweep_id: int) -> list[tuple[SweepTrial, Run]]:
    """Every trial started, by number, with its run."""
    return [
        (trial, run)
        for trial, run in session.execute(
            select(SweepTrial, Run)
            .join(Run, Run.id == SweepTrial.run_id)
            .where(SweepTrial.sweep_id == sweep_id)
            .order_by(SweepTrial.number)
        ).all()
    ]


def scored_rows(started: list[tuple[SweepTrial, Run]], scores: dict[int, Points]) -> list[TrialRow]:
    """Each started trial with the step and value of its latest checkpoint's score (None,
    None before there is one), from `eval_points`."""
    rows: list[TrialRow] = []
    for trial, run in started:
        step, value = scores[run.id][-1] if run.id in scores else (None, None)
        rows.append((trial, run, step, value))
    return rows


def trial_rows(session: Session, sweep_id: int, plan: SweepPlan) -> list[TrialRow]:
    """Every trial started, by number: its row, its run, and the step and value of the
    metric's last point (None, None before there is one): the last point the trial logged,
    or its latest checkpoint's score under `plan.eval_suite`."""
    if plan.eval_suite is not None:
        started = started_trials(session, sweep_id)
        run_ids = [run.id for _, run in started]
        return scored_rows(started, eval_points(session, run_ids, plan.eval_suite, plan.metric))
    rows = session.execute(
        select(SweepTrial, Run, MetricSeries.last_step, MetricSeries.last_value)
        .join(Run, Run.id == SweepTrial.run_id)
        .outerjoin(
            MetricSeries,
            (MetricSeries.run_id == Run.id) & (MetricSeries.key == plan.metric),
        )
        .where(SweepTrial.sweep_id == sweep_id)
        .order_by(SweepTrial.number)
    ).all()
    return [(trial, run, step, value) for trial, run, step, value in rows]


def trial_publics(session: Session, sweep: Sweep, plan: SweepPlan) -> list[SweepTrialPublic]:
    """Every trial started, by number, with its run's phase and the metric's last value."""
    return [
        SweepTrialPublic(
            number=trial.number,
            run_id=run.id,
            run_name=run.name,
            phase=Phase(run.phase),
            point=trial.point,
            value=value,
            step=step,
            stopped_reason=trial.stopped_reason,
        )
        for trial, run, step, value in trial_rows(session, sweep.id, plan)
    ]


_COLUMNS = (
    "id",
    "project_id",
    "name",
    "backend",
    "phase",
    "message",
    "manifest",
    "spec_digest",
    "code",
    "best_trial",
    "k8s_uid",
    "created_at",
    "finished_at",
)
