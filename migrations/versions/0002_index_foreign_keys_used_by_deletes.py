"""index foreign keys used by deletes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 19:04:55.716756
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attempts_resumed_from_checkpoint_id"),
            ["resumed_from_checkpoint_id"],
            unique=False,
        )

    with op.batch_alter_table("lineage_edges", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_lineage_edges_project_id"), ["project_id"], unique=False
        )

    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_run_inputs_checkpoint_id"), ["checkpoint_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_run_inputs_dataset_version_id"), ["dataset_version_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_inputs_dataset_version_id"))
        batch_op.drop_index(batch_op.f("ix_run_inputs_checkpoint_id"))

    with op.batch_alter_table("lineage_edges", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lineage_edges_project_id"))

    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_resumed_from_checkpoint_id"))
