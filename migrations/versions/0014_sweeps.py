"""sweeps: a sweep's spec, phase and controller state, and its trials' runs

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 23:00:00.000000

A sweep submitted through the API (or applied with kubectl and registered by the operator)
is kept here; the workers' controller starts its trials as runs, one row each in
sweep_trials, and keeps ASHA's state on the sweep (docs/sweeps.md).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _big_id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _moment() -> crucible.db.types.UtcDateTime:
    return crucible.db.types.UtcDateTime(timezone=True)


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.create_table(
        "sweeps",
        sa.Column("id", _big_id(), nullable=False),
        sa.Column("project_id", _big_id(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("manifest", json, nullable=False),
        sa.Column("spec_digest", sa.String(length=80), nullable=False),
        sa.Column("code", json, nullable=True),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("state", json, nullable=False),
        sa.Column("best_trial", sa.Integer(), nullable=True),
        sa.Column("k8s_uid", sa.String(length=64), nullable=True),
        sa.Column("created_at", _moment(), nullable=False),
        sa.Column("finished_at", _moment(), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_sweeps_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
        sa.UniqueConstraint("k8s_uid", name=op.f("uq_sweeps_k8s_uid")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_sweeps_project_id_name")),
    )
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", _big_id(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("run_id", _big_id(), nullable=False),
        sa.Column("point", json, nullable=False),
        sa.Column("stopped_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_trials_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_sweep_trials_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("sweep_id", "number", name=op.f("pk_sweep_trials")),
        sa.UniqueConstraint("run_id", name=op.f("uq_sweep_trials_run_id")),
    )


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_table("sweeps")
