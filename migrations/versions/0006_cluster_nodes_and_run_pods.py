"""cluster nodes and run pods

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 03:37:49.081638

What the operator (or the local executor) last reported: nodes with their GPUs, and the
pods of runs, for the dashboard's cluster page and each run's pods.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cluster_nodes",
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("schedulable", sa.Boolean(), nullable=False),
        sa.Column("gpus_allocatable", sa.Integer(), nullable=False),
        sa.Column("gpus_allocated", sa.Integer(), nullable=False),
        sa.Column("gpu_product", sa.String(length=100), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "name", name=op.f("pk_cluster_nodes")),
    )
    op.create_table(
        "run_pods",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_devices", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.BigInteger(), nullable=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_pods_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_pods")),
    )
    with op.batch_alter_table("run_pods", schema=None) as batch_op:
        batch_op.create_index("ix_run_pods_cluster", ["cluster"], unique=False)
        batch_op.create_index(batch_op.f("ix_run_pods_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("run_pods", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_pods_run_id"))
        batch_op.drop_index("ix_run_pods_cluster")

    op.drop_table("run_pods")
    op.drop_table("cluster_nodes")
