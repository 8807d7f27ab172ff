"""mlflow tracking: soft deletion of runs and experiments, and MLflow's logged models

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 09:00:00.000000

MLflow's clients delete and restore runs and experiments, so both get a `deleted_at`;
a logged model exists before its files do, so it has a table of its own until it is
finalized into a checkpoint (docs/mlflow.md).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _moment() -> crucible.db.types.UtcDateTime:
    return crucible.db.types.UtcDateTime(timezone=True)


def upgrade() -> None:
    for table in ("runs", "experiments"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("deleted_at", _moment(), nullable=True))
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.create_table(
        "mlflow_logged_models",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", _big_id(), nullable=False),
        sa.Column("experiment_id", _big_id(), nullable=False),
        sa.Column("source_run_id", _big_id(), nullable=True),
        sa.Column("checkpoint_id", _big_id(), nullable=True),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("model_type", sa.String(length=500), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("tags", json, nullable=False),
        sa.Column("params", json, nullable=False),
        sa.Column("created_at", _moment(), nullable=False),
        sa.Column("updated_at", _moment(), nullable=False),
        sa.Column("deleted_at", _moment(), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_mlflow_logged_models_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_mlflow_logged_models_experiment_id_experiments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["source_run_id"],
            ["runs.id"],
            name=op.f("fk_mlflow_logged_models_source_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_mlflow_logged_models_checkpoint_id_checkpoints"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mlflow_logged_models")),
    )
    with op.batch_alter_table("mlflow_logged_models", schema=None) as batch_op:
        for column in ("project_id", "experiment_id", "source_run_id", "checkpoint_id"):
            batch_op.create_index(
                batch_op.f(f"ix_mlflow_logged_models_{column}"), [column], unique=False
            )


def downgrade() -> None:
    op.drop_table("mlflow_logged_models")
    for table in ("experiments", "runs"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("deleted_at")
