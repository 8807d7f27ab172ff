"""Datasets, checkpoints, eval results, artifacts and the edges that connect them to runs."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import NEVER_REUSED, Base
from crucible.db.types import BigId, Json, UtcDateTime, utcnow


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("project_id", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(String(2000), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("dataset_id", "version"),
        UniqueConstraint("dataset_id", "digest"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    uri: Mapped[str] = mapped_column(String(2000))
    digest: Mapped[str] = mapped_column(String(100))
    record_count: Mapped[int | None] = mapped_column(BigInteger)
    schema: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    produced_by_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", ondelete="SET NULL"))
    step: Mapped[int] = mapped_column(BigInteger)
    uri: Mapped[str] = mapped_column(String(2000))
    digest: Mapped[str] = mapped_column(String(100))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    meta: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class EvalResult(Base):
    __tablename__ = "eval_results"
    __table_args__ = (
        UniqueConstraint("checkpoint_id", "suite", "eval_run_id"),
        Index("ix_eval_results_checkpoint", "checkpoint_id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    eval_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    suite: Mapped[str] = mapped_column(String(63))
    scores: Mapped[dict[str, float]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Artifact(Base):
    """A file or directory made from checkpoints or datasets (an exported model, a trained
    tokenizer), content-addressed; its sources are lineage edges (`derived`)."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("project_id", "uri"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    uri: Mapped[str] = mapped_column(String(2000))
    digest: Mapped[str] = mapped_column(String(100))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    meta: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    produced_by_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class RunInput(Base):
    """What a run read: a dataset version, the checkpoint it was initialised from, or an
    artifact it used."""

    __tablename__ = "run_inputs"
    __table_args__ = (
        UniqueConstraint("run_id", "dataset_version_id"),
        UniqueConstraint("run_id", "checkpoint_id"),
        UniqueConstraint("run_id", "artifact_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    # Indexed so deleting a checkpoint or dataset version finds its inputs without a scan.
    dataset_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True
    )
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True
    )
    artifact_id: Mapped[int | None] = mapped_column(
        ForeignKey("artifacts.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class LineageEdge(Base):
    """One edge of the lineage graph, written in the same transaction as the fact it mirrors.

    A single edge table (rather than a UNION over the fact tables) keeps graph queries one
    recursive CTE over two indexes, which is what makes depth-10 walks fast at 100k nodes.
    """

    __tablename__ = "lineage_edges"
    __table_args__ = (
        UniqueConstraint("src_type", "src_id", "dst_type", "dst_id"),
        Index("ix_lineage_edges_dst", "dst_type", "dst_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    src_type: Mapped[str] = mapped_column(String(16))
    src_id: Mapped[int] = mapped_column(BigInteger)
    dst_type: Mapped[str] = mapped_column(String(16))
    dst_id: Mapped[int] = mapped_column(BigInteger)
    relation: Mapped[str] = mapped_column(String(16))
