"""run profile requests: profiles asked of a running run

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 12:00:00.000000

`crucible runs profile ID --steps N` stores a request here; the run's trainer records the
steps and reports them back through its heartbeats (domain/profile_requests.py).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import crucible.db.types

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _moment() -> crucible.db.types.UtcDateTime:
    return crucible.db.types.UtcDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_profile_requests",
        sa.Column("id", _big_id(), nullable=False),
        sa.Column("run_id", _big_id(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("requested_at", _moment(), nullable=False),
        sa.Column("updated_at", _moment(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_run_profile_requests_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_profile_requests")),
    )
    op.create_index(
        op.f("ix_run_profile_requests_run_id"), "run_profile_requests", ["run_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_run_profile_requests_run_id"), table_name="run_profile_requests")
    op.drop_table("run_profile_requests")
