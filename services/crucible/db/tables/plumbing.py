"""Tables that make writes reliable: the transactional outbox and idempotency records."""

from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from crucible.db.tables.base import Base
from crucible.db.types import BigId, Json, UtcDateTime, utcnow


class OutboxMessage(Base):
    """A follow-up to publish, committed with the state change that needs it."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_unsent", "sent_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    topic: Mapped[str] = mapped_column(String(64))
    dedupe_key: Mapped[str] = mapped_column(String(200), unique=True)
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    publish_attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    # Set in the same transaction as the handler's effects: a redelivered message whose
    # handled_at is set is acknowledged without doing anything twice.
    handled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class IdempotencyRecord(Base):
    """The answer given to a request with an Idempotency-Key, replayed on retry."""

    __tablename__ = "idempotency_records"

    scope: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    response: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
