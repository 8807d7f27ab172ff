"""Runs, their attempts and their event timeline."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import NEVER_REUSED, Base
from crucible.db.types import BigId, Json, UtcDateTime, utcnow


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project_id", "kind", "name"),
        # One run per Kubernetes object (local runs have no namespace: NULLs never clash).
        UniqueConstraint("k8s_namespace", "kind", "k8s_name"),
        Index("ix_runs_experiment_created", "experiment_id", "created_at"),
        Index("ix_runs_project_phase", "project_id", "phase"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(16))
    backend: Mapped[str] = mapped_column(String(16))
    phase: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    # The manifest as submitted (apiVersion, kind, metadata, spec) and the digest of its spec.
    manifest: Mapped[dict[str, Any]] = mapped_column(Json)
    spec_digest: Mapped[str] = mapped_column(String(80))
    code_ref: Mapped[str] = mapped_column(String(300), default="")
    # Where the code came from at submission (schemas.provenance.CodeSource).
    code: Mapped[dict[str, Any] | None] = mapped_column(Json)
    tags: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    k8s_namespace: Mapped[str | None] = mapped_column(String(63))
    k8s_name: Mapped[str | None] = mapped_column(String(253))
    k8s_uid: Mapped[str | None] = mapped_column(String(64), unique=True)
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    # Inputs pinned when the run first became ready ({"datasets": ["name@3"], "checkpoint":
    # 12}), so every attempt reads the same versions even after `@latest` moves on.
    resolved_inputs: Mapped[dict[str, Any] | None] = mapped_column(Json)
    # Decided by the recovery worker for the next attempt: why it starts, which checkpoint it
    # resumes from (not a foreign key: retention may delete it; the SDK then refuses it), and
    # not before when (the backoff).
    next_attempt_reason: Mapped[str | None] = mapped_column(String(32))
    resume_checkpoint_id: Mapped[int | None] = mapped_column(BigInteger)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    latest_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    # Soft deletion, as MLflow's runs have it: hidden from MLflow's searches until restored.
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("run_id", "number"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    start_reason: Mapped[str] = mapped_column(String(32))
    resumed_from_checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL", use_alter=True), index=True
    )
    end_reason: Mapped[str | None] = mapped_column(String(64))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Set by the workload's SDK every few seconds; a stale one means a hung process.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # What ran: the image of the first pod seen running it and the digest the kubelet
    # resolved (set once; a tag may move later), and the packages the workload reported.
    image: Mapped[str | None] = mapped_column(String(512))
    image_id: Mapped[str | None] = mapped_column(String(512))
    packages: Mapped[dict[str, Any] | None] = mapped_column(Json)


class RunEvent(Base):
    """The run's timeline: phase changes, attempts, checkpoints, operator and worker notes."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run_id_id", "run_id", "id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class RunProfileRequest(Base):
    """A profile asked of a running run (domain/profile_requests.py): the steps the trainer
    chose for it once it started, and whether its files are written."""

    __tablename__ = "run_profile_requests"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    steps: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    first_step: Mapped[int | None] = mapped_column(BigInteger)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
