"""Served checkpoints: what a backend reports about each model it serves, with the checkpoint
its reference resolves to now and the one its pods actually run."""

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import NEVER_REUSED, Base
from crucible.db.types import BigId, Json, UtcDateTime, utcnow


class Deployment(Base):
    """One served checkpoint (a ServedModel resource on Kubernetes), upserted by its backend's
    reports under (project, backend, name)."""

    __tablename__ = "deployments"
    __table_args__ = (UniqueConstraint("project_id", "backend", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    backend: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(63))
    uid: Mapped[str | None] = mapped_column(String(64))
    # The CheckpointRef as the resource gives it: an id, or a run's latest or best.
    checkpoint_ref: Mapped[dict[str, Any]] = mapped_column(Json)
    # What the reference resolved to at the last report; NULL with `resolve_error` saying why.
    # Indexed (both) so deleting a checkpoint finds its deployments without a scan.
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL"), index=True
    )
    resolve_error: Mapped[str | None] = mapped_column(Text)
    serving_checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL"), index=True
    )
    replicas: Mapped[int] = mapped_column(Integer)
    ready_replicas: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    url: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Set by every report, changed or not: when the backend last said how it stands.
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
