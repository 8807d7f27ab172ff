"""Resolving a run's inputs before its first attempt: datasets, the checkpoint it starts
from (TrainingRun `initFrom`, RolloutJob `policy.checkpoint`, EvalJob `checkpoint`), the
artifacts its config names (`artifact:<name>`, `domain/artifact_refs.py`) and its code
package (`codePackage`, a `code` artifact named the same way).

A reference to something that does not exist yet (`producedBy` a run still running,
`name@latest` of a dataset nobody published) keeps the run WaitingForInputs; a producer that
failed fails the run. Once everything resolves, the concrete versions are pinned on the run,
so every later attempt reads the same data even after `@latest` has moved on, and the
lineage edges (dataset consumed by run, checkpoint initialised run) are written.
"""

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core import lineage
from crucible.core.access import Principal
from crucible.core.checkpoints import BestMode, best_live_checkpoint, latest_live_checkpoint
from crucible.core.datasets import version_by_ref
from crucible.core.events import TOPIC_CHECKPOINT_REGISTERED
from crucible.core.runs import load_run
from crucible.core.transitions import move_run
from crucible.db.tables import Artifact, Checkpoint, Dataset, DatasetVersion, OutboxMessage, Run
from crucible.domain import reasons
from crucible.domain.artifact_refs import ARTIFACT_SCHEME, artifact_refs
from crucible.domain.enums import ArtifactKind, Phase, Role, RunKind
from crucible.domain.resources import TAG_EVALUATES_RUN
from crucible.domain.specs import (
    CheckpointRef,
    DatasetInput,
    EvalJobManifest,
    RolloutJobManifest,
    TrainingRunManifest,
    parse_manifest,
)
from crucible.schemas.lineage import RunInputCreate
from crucible.schemas.runs import InputsResolution

# A name may be used by one run of each kind; a reference by name prefers the kind that
# normally makes the thing referred to.
_DATASET_PRODUCER_KINDS = (RunKind.rollout, RunKind.train, RunKind.eval)
CHECKPOINT_PRODUCER_KINDS = (RunKind.train, RunKind.rollout, RunKind.eval)


class _Waiting(Exception):
    """The input will exist later; the run waits."""


class _ProducerFailed(Exception):
    """The input can never exist; the run fails, with `reason` saying why."""

    def __init__(self, message: str, reason: str = reasons.REASON_PRODUCER_FAILED) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Resolved:
    datasets: list[DatasetVersion] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    """`artifact:<ref>` of the config or of codePackage -> the artifact pinned for it."""


def resolve_inputs(*, session: Session, principal: Principal, run_id: int) -> InputsResolution:
    """Resolve and pin the run's inputs, or say what it waits for (moving it to
    WaitingForInputs), or fail it when a producer failed. Repeated calls are cheap: a pinned
    run answers from its pins."""
    run = load_run(session, principal, run_id, Role.editor)
    if run.resolved_inputs is not None:
        return _answer(run, ready=True)
    if Phase(run.phase).is_terminal:
        return _answer(run, ready=False)
    try:
        resolved = _resolve(session, run)
    except _Waiting as exc:
        if Phase(run.phase) is Phase.Pending:
            move_run(session, run, Phase.WaitingForInputs, reasons.REASON_INPUTS_MISSING, str(exc))
        else:
            run.message = str(exc)
        return _answer(run, ready=False)
    except _ProducerFailed as exc:
        move_run(session, run, Phase.Failed, exc.reason, str(exc))
        return _answer(run, ready=False)

    run.resolved_inputs = {
        "datasets": [f"{_dataset_name(session, v)}@{v.version}" for v in resolved.datasets],
        "checkpoint": resolved.checkpoint.id if resolved.checkpoint is not None else None,
        "artifacts": {ref: artifact.id for ref, artifact in resolved.artifacts.items()},
    }
    for artifact in resolved.artifacts.values():
        lineage.link_input(
            session=session,
            principal=principal,
            run_id=run.id,
            input_in=RunInputCreate(artifact_id=artifact.id),
        )
    for version in resolved.datasets:
        lineage.link_input(
            session=session,
            principal=principal,
            run_id=run.id,
            input_in=RunInputCreate(dataset_version_id=version.id),
        )
    if resolved.checkpoint is not None:
        lineage.link_input(
            session=session,
            principal=principal,
            run_id=run.id,
            input_in=RunInputCreate(checkpoint_id=resolved.checkpoint.id),
        )
    session.flush()
    return _answer(run, ready=True)


def _answer(run: Run, *, ready: bool) -> InputsResolution:
    pinned = run.resolved_inputs or {}
    return InputsResolution(
        ready=ready,
        phase=Phase(run.phase),
        message=run.message,
        datasets=list(pinned.get("datasets", [])),
        checkpoint=pinned.get("checkpoint"),
        artifacts=dict(pinned.get("artifacts", {})),
    )


def _resolve(session: Session, run: Run) -> _Resolved:
    manifest = parse_manifest(run.manifest)
    dataset_inputs: list[DatasetInput] = []
    checkpoint_ref: CheckpointRef | None = None
    if isinstance(manifest, TrainingRunManifest):
        dataset_inputs = list(manifest.spec.inputs)
        checkpoint_ref = manifest.spec.init_from
    elif isinstance(manifest, RolloutJobManifest):
        dataset_inputs = [manifest.spec.prompts] if manifest.spec.prompts is not None else []
        checkpoint_ref = manifest.spec.policy.checkpoint
    elif isinstance(manifest, EvalJobManifest):
        checkpoint_ref = manifest.spec.checkpoint
    waiting: list[str] = []
    resolved = _Resolved()
    for item in dataset_inputs:
        try:
            resolved.datasets.append(_dataset_version(session, run, item))
        except _Waiting as exc:
            waiting.append(str(exc))
    if checkpoint_ref is not None:
        try:
            resolved.checkpoint = _checkpoint(session, run, checkpoint_ref)
        except _Waiting as exc:
            waiting.append(str(exc))
    for ref in artifact_refs(manifest.spec.config):
        try:
            resolved.artifacts[ref] = _artifact(session, run, ref)
        except _Waiting as exc:
            waiting.append(str(exc))
    if manifest.spec.code_package is not None:
        ref = manifest.spec.code_package.removeprefix(ARTIFACT_SCHEME)
        try:
            resolved.artifacts[ref] = _code_package(session, run, ref)
        except _Waiting as exc:
            waiting.append(str(exc))
    if waiting:
        raise _Waiting("; ".join(waiting))
    return resolved


def _dataset_version(session: Session, run: Run, item: DatasetInput) -> DatasetVersion:
    if item.dataset is not None:
        dataset, version = version_by_ref(session, run.project_id, item.dataset)
        if dataset is None:
            raise _Waiting(f"dataset {item.dataset.rpartition('@')[0]!r} has no version yet")
        if version is None:
            raise _Waiting(f"dataset {item.dataset} does not exist yet")
        return version
    assert item.produced_by is not None  # the spec demands exactly one source
    producer = _finished_producer(session, run, item.produced_by, _DATASET_PRODUCER_KINDS)
    version = session.scalar(
        select(DatasetVersion)
        .where(DatasetVersion.produced_by_run_id == producer.id)
        .order_by(DatasetVersion.id.desc())
        .limit(1)
    )
    if version is None:
        raise _ProducerFailed(
            f"run {producer.name!r} succeeded without publishing a dataset, so `producedBy: "
            f"{producer.name}` can never resolve"
        )
    return version


def _code_package(session: Session, run: Run, ref: str) -> Artifact:
    artifact = _artifact(session, run, ref, where="codePackage")
    if artifact.kind != ArtifactKind.code.value:
        raise _ProducerFailed(
            f"codePackage `artifact:{ref}` is artifact {artifact.id} ({artifact.name}), a "
            f"{artifact.kind} artifact, not a code package",
            reasons.REASON_NOT_A_CODE_PACKAGE,
        )
    return artifact


def _artifact(session: Session, run: Run, ref: str, where: str = "config") -> Artifact:
    """The artifact of id `ref`, or the newest named `ref`, in the run's project."""
    if ref.isascii() and ref.isdigit():
        artifact = session.get(Artifact, int(ref))
        if artifact is None or artifact.project_id != run.project_id:
            raise _ProducerFailed(
                f"artifact {ref} ({where} `artifact:{ref}`) does not exist in this project",
                reasons.REASON_ARTIFACT_NOT_IN_PROJECT,
            )
        return artifact
    newest = session.scalar(
        select(Artifact)
        .where(Artifact.project_id == run.project_id, Artifact.name == ref)
        .order_by(Artifact.id.desc())
        .limit(1)
    )
    if newest is None:
        raise _Waiting(f"artifact {ref!r} does not exist yet")
    return newest


def _checkpoint(session: Session, run: Run, ref: CheckpointRef) -> Checkpoint:
    if ref.id is not None:
        checkpoint = session.get(Checkpoint, ref.id)
        if checkpoint is None or session.get_one(Run, checkpoint.run_id).project_id != (
            run.project_id
        ):
            raise _ProducerFailed(
                f"checkpoint {ref.id} does not exist in this project",
                reasons.REASON_CHECKPOINT_NOT_IN_PROJECT,
            )
        if checkpoint.deleted_at is not None:
            raise _ProducerFailed(
                f"checkpoint {ref.id} was deleted by retention", reasons.REASON_CHECKPOINT_DELETED
            )
        return checkpoint
    assert ref.run is not None  # the spec demands exactly one source
    producer = _finished_producer(session, run, ref.run, CHECKPOINT_PRODUCER_KINDS)
    if ref.checkpoint == "latest":
        checkpoint = latest_live_checkpoint(session, producer.id)
        if checkpoint is None:
            raise _ProducerFailed(f"run {producer.name!r} succeeded without a checkpoint")
        return checkpoint
    metric = ref.checkpoint.removeprefix("best:")
    if _evals_pending(session, producer):
        raise _Waiting(f"the evals of run {producer.name!r} are still running")
    best = best_live_checkpoint(session, producer.id, metric, BestMode.max)
    if best is None:
        raise _ProducerFailed(f"no checkpoint of run {producer.name!r} has an eval of {metric!r}")
    return best[0]


def producer_named(
    session: Session, project_id: int, name: str, kinds: tuple[RunKind, ...]
) -> Run | None:
    """The project's run called `name`, of the first of `kinds` that has one."""
    candidates = {
        r.kind: r
        for r in session.scalars(select(Run).where(Run.project_id == project_id, Run.name == name))
    }
    return next((candidates[k] for k in kinds if k in candidates), None)


def _finished_producer(session: Session, run: Run, name: str, kinds: tuple[RunKind, ...]) -> Run:
    producer = producer_named(session, run.project_id, name, kinds)
    if producer is None:
        raise _Waiting(f"run {name!r} has not been submitted yet")
    phase = Phase(producer.phase)
    if phase in (Phase.Failed, Phase.Cancelled):
        raise _ProducerFailed(f"run {name!r} it depends on is {phase.value}")
    if phase is not Phase.Succeeded:
        raise _Waiting(f"run {name!r} is {phase.value}")
    return producer


def _evals_pending(session: Session, producer: Run) -> bool:
    """Evals of the producer's checkpoints not yet scheduled, or scheduled and not finished."""
    untriggered = session.scalar(
        select(OutboxMessage.id)
        .where(
            OutboxMessage.topic == TOPIC_CHECKPOINT_REGISTERED,
            OutboxMessage.payload["run_id"].as_integer() == producer.id,
            OutboxMessage.handled_at.is_(None),
        )
        .limit(1)
    )
    if untriggered is not None:
        return True
    running = session.scalar(
        select(Run.id)
        .where(
            Run.project_id == producer.project_id,
            Run.kind == RunKind.eval.value,
            Run.tags[TAG_EVALUATES_RUN].as_string() == str(producer.id),
            Run.phase.not_in([p.value for p in Phase if p.is_terminal]),
        )
        .limit(1)
    )
    return running is not None


def _dataset_name(session: Session, version: DatasetVersion) -> str:
    return session.get_one(Dataset, version.dataset_id).name
