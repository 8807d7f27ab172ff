"""recovery decisions, pinned inputs, handled outbox messages

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 21:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "resolved_inputs",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )
        batch_op.add_column(sa.Column("next_attempt_reason", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("resume_checkpoint_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "next_attempt_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True
            )
        )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("handled_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("handled_at")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("resume_checkpoint_id")
        batch_op.drop_column("next_attempt_reason")
        batch_op.drop_column("resolved_inputs")
