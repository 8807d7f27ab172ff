"""Sweeps: a base run spec, a search space and a budget, whose trials the control plane
starts as runs (`core/sweep_controller.py`), and each trial's run and fate."""

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import NEVER_REUSED, Base
from crucible.db.types import BigId, Json, UtcDateTime, utcnow


class Sweep(Base):
    __tablename__ = "sweeps"
    __table_args__ = (UniqueConstraint("project_id", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    backend: Mapped[str] = mapped_column(String(16))
    # The manifest as submitted (apiVersion, kind, metadata, spec) and the digest of its spec.
    manifest: Mapped[dict[str, Any]] = mapped_column(Json)
    spec_digest: Mapped[str] = mapped_column(String(80))
    # Where the code came from at submission; every trial runs it (schemas.provenance).
    code: Mapped[dict[str, Any] | None] = mapped_column(Json)
    phase: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    # The controller's own state between ticks (ASHA's rungs, the steps seen of each trial),
    # so a restarted controller decides as the one before would have.
    state: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    best_trial: Mapped[int | None] = mapped_column(Integer)
    k8s_uid: Mapped[str | None] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class SweepTrial(Base):
    __tablename__ = "sweep_trials"

    sweep_id: Mapped[int] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    # Its parameters' values, by config path, as drawn when it started (under tpe they
    # depend on the trials finished then).
    point: Mapped[dict[str, Any]] = mapped_column(Json)
    # Why the sweep stopped it early (ASHA's sentence); NULL for a trial it let run.
    stopped_reason: Mapped[str | None] = mapped_column(Text)
