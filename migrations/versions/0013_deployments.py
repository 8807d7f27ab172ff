"""deployments: served checkpoints as their backends report them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 09:00:00.000000

A served checkpoint (a ServedModel on Kubernetes) is upserted by its backend's reports, with
the checkpoint its reference resolves to now and the one its pods run, for the API's and the
dashboard's list of deployments (docs/serving.md).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _moment() -> crucible.db.types.UtcDateTime:
    return crucible.db.types.UtcDateTime(timezone=True)


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.create_table(
        "deployments",
        sa.Column("id", _big_id(), nullable=False),
        sa.Column("project_id", _big_id(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=True),
        sa.Column("checkpoint_ref", json, nullable=False),
        sa.Column("checkpoint_id", _big_id(), nullable=True),
        sa.Column("resolve_error", sa.Text(), nullable=True),
        sa.Column("serving_checkpoint_id", _big_id(), nullable=True),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("ready_replicas", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("created_at", _moment(), nullable=False),
        sa.Column("updated_at", _moment(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_deployments_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_deployments_checkpoint_id_checkpoints"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["serving_checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_deployments_serving_checkpoint_id_checkpoints"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint(
            "project_id", "backend", "name", name=op.f("uq_deployments_project_id_backend_name")
        ),
    )
    with op.batch_alter_table("deployments", schema=None) as batch_op:
        for column in ("checkpoint_id", "serving_checkpoint_id"):
            batch_op.create_index(batch_op.f(f"ix_deployments_{column}"), [column], unique=False)


def downgrade() -> None:
    op.drop_table("deployments")
