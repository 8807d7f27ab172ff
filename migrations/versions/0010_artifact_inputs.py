"""artifact inputs

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 08:00:00.000000

A run may read an artifact (a trained tokenizer, an exported model) as it reads a dataset
version: a run_inputs row, so lineage runs from the tokenizer to what was trained with it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("artifact_id", _big_id(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_run_inputs_artifact_id_artifacts"),
            "artifacts",
            ["artifact_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch_op.create_unique_constraint(
            batch_op.f("uq_run_inputs_run_id_artifact_id"), ["run_id", "artifact_id"]
        )
        batch_op.create_index(
            batch_op.f("ix_run_inputs_artifact_id"), ["artifact_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_inputs_artifact_id"))
        batch_op.drop_constraint(batch_op.f("uq_run_inputs_run_id_artifact_id"), type_="unique")
        batch_op.drop_constraint(
            batch_op.f("fk_run_inputs_artifact_id_artifacts"), type_="foreignkey"
        )
        batch_op.drop_column("artifact_id")
