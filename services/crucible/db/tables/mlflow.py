"""What MLflow has and Crucible had no row for: the logged model before it is a checkpoint."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import Base
from crucible.db.types import Json, UtcDateTime, utcnow


class LoggedModel(Base):
    """An MLflow LoggedModel. It exists (PENDING) before its files are uploaded; once the
    client finalizes it READY, its files become a checkpoint of its source run."""

    __tablename__ = "mlflow_logged_models"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    source_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str] = mapped_column(String(500))
    status: Mapped[str] = mapped_column(String(32))
    model_type: Mapped[str] = mapped_column(String(500), default="")
    step: Mapped[int] = mapped_column(BigInteger, default=0)
    tags: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    params: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
