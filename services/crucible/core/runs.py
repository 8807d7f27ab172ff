"""Runs: submit, read, cancel, and the phase and attempt reports of the operator/executor."""

from collections.abc import Mapping
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crucible.core import profile_requests, recovery
from crucible.core.access import Principal
from crucible.core.events import (
    TOPIC_ATTEMPT_ENDED,
    TOPIC_RUN_SUBMITTED,
    enqueue,
    record_event,
)
from crucible.core.lookups import (
    experiment_by_name,
    get_or_404,
    listed_project_id,
    project_by_name,
)
from crucible.core.pagination import paginate
from crucible.core.transitions import move_run
from crucible.db.tables import Attempt, Checkpoint, Experiment, Project, Run, RunEvent
from crucible.db.upsert import insert_ignoring_duplicates
from crucible.domain import reasons
from crucible.domain.digests import spec_digest
from crucible.domain.enums import Backend, Phase, Role, RunKind
from crucible.domain.errors import Conflict, InvalidInput, NotFound
from crucible.domain.resources import TAG_REPRODUCES, reserved_tag
from crucible.domain.specs import (
    KIND_OF_MANIFEST,
    EvalJobManifest,
    RolloutJobManifest,
    TrainingRunManifest,
)
from crucible.schemas.common import Page
from crucible.schemas.provenance import AttemptEnvironment, CodeSource
from crucible.schemas.runs import (
    AttemptEnd,
    AttemptHeartbeat,
    AttemptPublic,
    AttemptStart,
    EventFeed,
    HeartbeatAnswer,
    PhaseReport,
    RunEventPublic,
    RunPublic,
    RunSubmit,
)

RUN_SORTS = {"created_at": Run.created_at, "name": Run.name, "phase": Run.phase}


def gpus_of(manifest: TrainingRunManifest | RolloutJobManifest | EvalJobManifest) -> int:
    if isinstance(manifest, TrainingRunManifest):
        return manifest.spec.nodes * manifest.spec.gpus_per_node
    if isinstance(manifest, RolloutJobManifest):
        return manifest.spec.replicas * manifest.spec.gpus_per_replica
    return manifest.spec.gpus


def submit_run(
    *,
    session: Session,
    principal: Principal,
    run_in: RunSubmit,
    platform_tags: Mapping[str, str] | None = None,
) -> RunPublic:
    """Create a run, or return the existing one when the same submission is repeated.
    `platform_tags`: the reserved tags (`resources.reserved_tag`) the platform's own writers
    (the eval trigger) set, which `run_in.tags` may not hold."""
    project = project_by_name(session, run_in.project)
    principal.require(project.id, Role.editor, entity="project", key=run_in.project)
    tags = _checked_tags(session, project, run_in.tags) | dict(platform_tags or {})
    manifest = run_in.manifest
    is_k8s = run_in.backend is Backend.kubernetes
    if is_k8s:
        require_project_namespace(project, manifest.metadata.namespace)
    kind = KIND_OF_MANIFEST[manifest.kind]
    manifest_json = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    digest = spec_digest(manifest_json["spec"])

    if run_in.k8s_uid is not None:
        existing = session.scalar(select(Run).where(Run.k8s_uid == run_in.k8s_uid))
        if existing is not None:
            return RunPublic.model_validate(existing)
    existing = session.scalar(
        select(Run).where(
            Run.project_id == project.id, Run.kind == kind, Run.name == manifest.metadata.name
        )
    )
    if existing is not None:
        other_object = run_in.k8s_uid is not None and existing.k8s_uid not in (None, run_in.k8s_uid)
        if (
            existing.spec_digest == digest
            and existing.backend == run_in.backend.value
            and not other_object
        ):
            if run_in.k8s_uid is not None and existing.k8s_uid is None:
                # The resource the control plane created for a REST submission registers.
                existing.k8s_uid = run_in.k8s_uid
                session.flush()
            return RunPublic.model_validate(existing)
        if other_object:
            raise Conflict(
                f"a {manifest.kind} named {manifest.metadata.name!r} already ran in project "
                f"{project.name!r} (run {existing.id}, {existing.phase}); run names are kept "
                "for lineage, so pick another name"
            )
        raise Conflict(
            f"a {manifest.kind} named {manifest.metadata.name!r} already exists in project "
            f"{project.name!r} with a different spec; pick another name"
        )

    experiment = experiment_by_name(session, project.id, manifest.spec.experiment)
    if experiment is None:
        # Runs of a new experiment often arrive together (a loop applied at once): the
        # first insert wins and the others read it, instead of failing on the unique key.
        insert_ignoring_duplicates(
            session, Experiment, project_id=project.id, name=manifest.spec.experiment
        )
        experiment = experiment_by_name(session, project.id, manifest.spec.experiment)
        assert experiment is not None
    run = Run(
        project_id=project.id,
        experiment_id=experiment.id,
        name=manifest.metadata.name,
        kind=kind,
        backend=run_in.backend.value,
        phase=Phase.Pending.value,
        reason=reasons.REASON_SUBMITTED,
        manifest=manifest_json,
        spec_digest=digest,
        code_ref=run_in.code_ref or code_ref_of(run_in.code),
        code=run_in.code.model_dump(mode="json") if run_in.code is not None else None,
        tags=tags,
        gpus=gpus_of(manifest),
        k8s_namespace=project.namespace if is_k8s else None,
        k8s_name=manifest.metadata.name if is_k8s else None,
        k8s_uid=run_in.k8s_uid,
    )
    session.add(run)
    session.flush()
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_SUBMITTED,
        reason=reasons.REASON_SUBMITTED,
        message=f"{manifest.kind} submitted to the {run.backend} backend",
    )
    if run.k8s_uid is None:  # a run the operator registered has its resource already
        enqueue(
            session,
            topic=TOPIC_RUN_SUBMITTED,
            key=str(run.id),
            payload={"run_id": run.id, "backend": run.backend},
        )
    return RunPublic.model_validate(run)


def _checked_tags(session: Session, project: Project, tags: Mapping[str, str]) -> dict[str, str]:
    """A user's tags, refused when they hold a reserved one other than a reproduction's,
    whose run must be of the same project (it is read as such)."""
    for key, value in tags.items():
        if reserved_tag(key):  # RunSubmit refuses them; this holds for any other caller
            raise InvalidInput(
                "tags", value, f"tag {key!r} is reserved for Crucible itself", location="body"
            )
    reproduces = tags.get(TAG_REPRODUCES)
    if reproduces is not None:
        original = (
            session.get(Run, int(reproduces))
            if reproduces.isascii() and reproduces.isdecimal() and len(reproduces) <= 18
            else None
        )
        if original is None or original.project_id != project.id:
            # Field "tags", not the key: the error's location splits fields at dots.
            raise InvalidInput(
                "tags",
                reproduces,
                f"tag {TAG_REPRODUCES!r} names no run of project {project.name!r}; a "
                "reproduction repeats a run of its own project",
                location="body",
            )
    return dict(tags)


def code_ref_of(code: CodeSource | None) -> str:
    """The short name shown where there is no room for the whole record."""
    if code is None or code.git is None:
        return ""
    return code.git.commit[:12] + ("-dirty" if code.git.dirty else "")


def require_project_namespace(project: Project, namespace: str | None) -> None:
    """A project's Kubernetes runs live in its own namespace: another project's (or one no
    project owns, such as kube-system) would let one tenant name, and clash with, objects
    of another."""
    if namespace is not None and namespace != project.namespace:
        raise InvalidInput(
            "manifest.metadata.namespace",
            namespace,
            f"project {project.name!r} runs its Kubernetes runs in its own namespace "
            f"{project.namespace!r}; leave metadata.namespace out, or submit to the project "
            "whose namespace it is",
            location="body",
        )


def list_runs(
    *,
    session: Session,
    principal: Principal,
    project: str | None = None,
    experiment_id: int | None = None,
    kind: RunKind | None = None,
    phase: Phase | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    sort: str = "created_at",
    descending: bool = True,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[RunPublic]:
    query = select(Run)
    if (project_id := listed_project_id(session, principal, project)) is not None:
        query = query.where(Run.project_id == project_id)
    if experiment_id is not None:
        experiment = get_or_404(session, Experiment, experiment_id, "experiment")
        principal.require(
            experiment.project_id, Role.viewer, entity="experiment", key=experiment_id
        )
        query = query.where(Run.experiment_id == experiment_id)
    if kind is not None:
        query = query.where(Run.kind == kind.value)
    if phase is not None:
        query = query.where(Run.phase == phase.value)
    if tag is not None:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise InvalidInput("tag", tag, "filter tags as key=value", location="query")
        if any(ord(c) < 0x20 for c in tag):
            # No stored tag holds one, and SQLite would read it as the end of the JSON path.
            raise InvalidInput("tag", tag, "must not contain control characters", location="query")
        query = query.where(Run.tags[key].as_string() == value)
    if created_after is not None:
        query = query.where(Run.created_at >= created_after)
    if created_before is not None:
        query = query.where(Run.created_at < created_before)
    if sort not in RUN_SORTS:
        raise InvalidInput("sort", sort, f"sort by one of {', '.join(RUN_SORTS)}", location="query")
    return paginate(
        session,
        query,
        sort=RUN_SORTS[sort],
        id_column=Run.id,
        descending=descending,
        cursor=cursor,
        limit=limit,
        to_public=RunPublic.model_validate,
    )


def load_run(session: Session, principal: Principal, run_id: int, role: Role) -> Run:
    run = get_or_404(session, Run, run_id, "run")
    principal.require(run.project_id, role, entity="run", key=run_id)
    return run


def get_run(*, session: Session, principal: Principal, run_id: int) -> RunPublic:
    return RunPublic.model_validate(load_run(session, principal, run_id, Role.viewer))


def cancel_run(*, session: Session, principal: Principal, run_id: int) -> RunPublic:
    run = load_run(session, principal, run_id, Role.editor)
    move_run(session, run, Phase.Cancelled, reasons.REASON_CANCELLED_BY_USER, "cancelled by user")
    return RunPublic.model_validate(run)


def request_preemption(*, session: Session, principal: Principal, run_id: int) -> RunPublic:
    """Ask the backend to preempt a running run as a node drain would (SIGTERM, checkpoint,
    exit). Recorded as an event, which the executor or operator acts on."""
    run = load_run(session, principal, run_id, Role.editor)
    if Phase(run.phase) is not Phase.Running:
        raise Conflict(f"run {run.id} is {run.phase}; only a Running run can be preempted")
    # Aimed at the attempt running now, so the next attempt does not take it for its own.
    attempt = session.scalar(
        select(Attempt.number).where(Attempt.run_id == run.id, Attempt.ended_at.is_(None))
    )
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_PREEMPT_REQUESTED,
        reason=reasons.REASON_PREEMPTED,
        message=f"preemption of attempt {attempt} requested",
        data={"attempt": attempt},
    )
    session.flush()
    return RunPublic.model_validate(run)


def report_phase(
    *, session: Session, principal: Principal, run_id: int, report: PhaseReport
) -> RunPublic:
    run = load_run(session, principal, run_id, Role.editor)
    if report.phase is Phase.Interrupted and _recovery_decided(session, run):
        return RunPublic.model_validate(run)  # a report retried after its answer was lost
    if Phase(run.phase) is not report.phase:
        move_run(session, run, report.phase, report.reason, report.message)
        recovery.decide_at_end(session, run)
    elif (run.reason, run.message) != (report.reason, report.message):
        # Same phase, news about it (the scheduler's reason a run waits): no transition.
        run.reason, run.message = report.reason, report.message
        session.flush()
    return RunPublic.model_validate(run)


def _recovery_decided(session: Session, run: Run) -> bool:
    """Whether recovery already scheduled the attempt after the run's latest, which has
    ended: an Interrupted report now can only be a retry of the one that led there."""
    if Phase(run.phase) not in (Phase.Recovering, Phase.Scheduling):
        return False
    latest = session.scalar(
        select(Attempt).where(Attempt.run_id == run.id, Attempt.number == run.attempt_count)
    )
    if latest is None or latest.ended_at is None:
        return False
    scheduled = session.scalar(
        select(RunEvent.data)
        .where(RunEvent.run_id == run.id, RunEvent.type == reasons.EVENT_RECOVERY_SCHEDULED)
        .order_by(RunEvent.id.desc())
        .limit(1)
    )
    return scheduled is not None and scheduled.get("attempt") == latest.number + 1


def end_open_attempt(session: Session, run: Run, reason: str, message: str = "") -> None:
    """End the run's open attempt, if any, for a reason judged outside the backend."""
    attempt = session.scalar(
        select(Attempt).where(Attempt.run_id == run.id, Attempt.ended_at.is_(None))
    )
    if attempt is None:
        return
    attempt.end_reason, attempt.message = reason, message
    attempt.ended_at = datetime.now(UTC)
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_ATTEMPT_ENDED,
        reason=reason,
        message=message or f"attempt {attempt.number} ended",
        data={"attempt": attempt.number, "exit_code": None},
    )


def start_attempt(
    *, session: Session, principal: Principal, run_id: int, attempt_in: AttemptStart
) -> AttemptPublic:
    run = load_run(session, principal, run_id, Role.editor)
    if Phase(run.phase).is_terminal:
        raise Conflict(f"run {run.id} is {run.phase}; it takes no new attempts")
    open_attempt = session.scalar(
        select(Attempt).where(Attempt.run_id == run.id, Attempt.ended_at.is_(None))
    )
    if open_attempt is not None:
        raise Conflict(f"attempt {open_attempt.number} of run {run.id} has not ended yet")
    if attempt_in.resumed_from_checkpoint_id is not None:
        _require_checkpoint_in_project(
            session, attempt_in.resumed_from_checkpoint_id, run.project_id
        )
    run.attempt_count += 1
    attempt = Attempt(
        run_id=run.id,
        number=run.attempt_count,
        start_reason=attempt_in.reason.value,
        resumed_from_checkpoint_id=attempt_in.resumed_from_checkpoint_id,
        started_at=datetime.now(UTC),
    )
    session.add(attempt)
    session.flush()
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_ATTEMPT_STARTED,
        reason=attempt_in.reason.value,
        message=f"attempt {attempt.number} started",
        data={
            "attempt": attempt.number,
            "resumed_from_checkpoint_id": attempt_in.resumed_from_checkpoint_id,
        },
    )
    return AttemptPublic.model_validate(attempt)


def _require_checkpoint_in_project(session: Session, checkpoint_id: int, project_id: int) -> None:
    """Another project's checkpoint answers 404, as a missing one does: a run resumes only
    from what its own project wrote."""
    owner = session.scalar(
        select(Run.project_id)
        .join(Checkpoint, Checkpoint.run_id == Run.id)
        .where(Checkpoint.id == checkpoint_id)
    )
    if owner != project_id:
        raise NotFound("checkpoint", checkpoint_id)


def attempt_of(session: Session, run: Run, number: int) -> Attempt:
    attempt = session.scalar(
        select(Attempt).where(Attempt.run_id == run.id, Attempt.number == number)
    )
    if attempt is None:
        raise NotFound("attempt", f"{run.id}/{number}")
    return attempt


def end_attempt(
    *, session: Session, principal: Principal, run_id: int, number: int, attempt_in: AttemptEnd
) -> AttemptPublic:
    run = load_run(session, principal, run_id, Role.editor)
    attempt = attempt_of(session, run, number)
    if attempt.ended_at is not None:
        if (attempt.end_reason, attempt.exit_code) == (attempt_in.end_reason, attempt_in.exit_code):
            return AttemptPublic.model_validate(attempt)  # a retried report
        raise Conflict(f"attempt {number} of run {run_id} already ended ({attempt.end_reason})")
    attempt.end_reason = attempt_in.end_reason
    attempt.exit_code = attempt_in.exit_code
    attempt.message = attempt_in.message
    attempt.ended_at = datetime.now(UTC)
    record_event(
        session,
        run_id=run.id,
        type=reasons.EVENT_ATTEMPT_ENDED,
        reason=attempt_in.end_reason,
        message=attempt_in.message or f"attempt {number} ended",
        data={"attempt": number, "exit_code": attempt_in.exit_code},
    )
    recovery.decide_at_end(session, run)
    enqueue(
        session,
        topic=TOPIC_ATTEMPT_ENDED,
        key=f"{run.id}:{number}",
        payload={
            "run_id": run.id,
            "attempt": number,
            "end_reason": attempt_in.end_reason,
            "exit_code": attempt_in.exit_code,
        },
    )
    session.flush()
    return AttemptPublic.model_validate(attempt)


def heartbeat(
    *, session: Session, principal: Principal, run_id: int, heartbeat_in: AttemptHeartbeat
) -> HeartbeatAnswer:
    """Mark the attempt alive now, record how its live profile request stands, and answer
    with the request it is to record, if any. An ended attempt is a 409: its process should
    have gone."""
    run = load_run(session, principal, run_id, Role.editor)
    attempt = attempt_of(session, run, heartbeat_in.attempt)
    if attempt.ended_at is not None:
        raise Conflict(
            f"attempt {attempt.number} of run {run_id} already ended ({attempt.end_reason}); "
            "a process still sending its heartbeats should stop"
        )
    attempt.heartbeat_at = datetime.now(UTC)
    if heartbeat_in.profile is not None:
        profile_requests.record_progress(session, run.id, heartbeat_in.profile)
    session.flush()
    answer = HeartbeatAnswer.model_validate(attempt)
    answer.profile_request = profile_requests.request_to_record(session, run.id)
    return answer


def report_environment(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    number: int,
    environment: AttemptEnvironment,
) -> AttemptPublic:
    """Record what the attempt's workload runs on. A repeated report replaces the last."""
    run = load_run(session, principal, run_id, Role.editor)
    attempt = attempt_of(session, run, number)
    attempt.packages = dict(environment.packages)
    session.flush()
    return AttemptPublic.model_validate(attempt)


def list_attempts(*, session: Session, principal: Principal, run_id: int) -> list[AttemptPublic]:
    run = load_run(session, principal, run_id, Role.viewer)
    rows = session.scalars(select(Attempt).where(Attempt.run_id == run.id).order_by(Attempt.number))
    return [AttemptPublic.model_validate(r) for r in rows]


def list_events(
    *, session: Session, principal: Principal, run_id: int, after_id: int = 0, limit: int = 500
) -> list[RunEventPublic]:
    run = load_run(session, principal, run_id, Role.viewer)
    rows = session.scalars(
        select(RunEvent)
        .where(RunEvent.run_id == run.id, RunEvent.id > after_id)
        .order_by(RunEvent.id)
        .limit(limit)
    )
    return [RunEventPublic.model_validate(r) for r in rows]


def event_feed(
    *, session: Session, principal: Principal, after_id: int | None, limit: int = 1000
) -> EventFeed:
    """Events of every run the caller may see (a project token: its project's), for
    followers such as the operator that would otherwise poll each run."""
    if after_id is None:
        latest = select(func.max(RunEvent.id))
        if principal.project_id is not None:
            latest = latest.join(Run, Run.id == RunEvent.run_id).where(
                Run.project_id == principal.project_id
            )
        return EventFeed(items=[], next_after_id=session.scalar(latest) or 0)
    query = select(RunEvent).where(RunEvent.id > after_id).order_by(RunEvent.id).limit(limit)
    if principal.project_id is not None:
        query = query.join(Run, Run.id == RunEvent.run_id).where(
            Run.project_id == principal.project_id
        )
    items = [RunEventPublic.model_validate(r) for r in session.scalars(query)]
    return EventFeed(items=items, next_after_id=items[-1].id if items else after_id)


def list_experiment_events(
    *,
    session: Session,
    principal: Principal,
    experiment_id: int,
    after_id: int = 0,
    limit: int = 500,
) -> list[RunEventPublic]:
    experiment = get_or_404(session, Experiment, experiment_id, "experiment")
    principal.require(experiment.project_id, Role.viewer, entity="experiment", key=experiment_id)
    rows = session.scalars(
        select(RunEvent)
        .join(Run, Run.id == RunEvent.run_id)
        .where(Run.experiment_id == experiment_id, RunEvent.id > after_id)
        .order_by(RunEvent.id)
        .limit(limit)
    )
    return [RunEventPublic.model_validate(r) for r in rows]
