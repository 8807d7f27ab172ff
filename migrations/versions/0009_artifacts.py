"""artifacts

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 03:45:00.000000

What is made from checkpoints and datasets (an exported Hugging Face model, a trained
tokenizer); its sources are lineage edges, so the table holds only the artifact itself.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", _big_id(), nullable=False),
        sa.Column("project_id", _big_id(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("uri", sa.String(length=2000), nullable=False),
        sa.Column("digest", sa.String(length=100), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("meta", _json(), nullable=False),
        sa.Column("produced_by_run_id", _big_id(), nullable=True),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_artifacts_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["produced_by_run_id"],
            ["runs.id"],
            name=op.f("fk_artifacts_produced_by_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("project_id", "uri", name=op.f("uq_artifacts_project_id_uri")),
    )
    op.create_index(
        op.f("ix_artifacts_produced_by_run_id"), "artifacts", ["produced_by_run_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_produced_by_run_id"), table_name="artifacts")
    op.drop_table("artifacts")
