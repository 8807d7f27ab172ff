"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 17:58:07.055318
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import crucible.db.types

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "idempotency_records",
        sa.Column("scope", sa.String(length=100), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column(
            "response",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name=op.f("pk_idempotency_records")),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("topic", sa.String(length=64), nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.Column("publish_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_outbox_dedupe_key")),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_unsent", ["sent_at", "id"], unique=False)

    op.create_table(
        "projects",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.String(length=2000), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
        sa.UniqueConstraint("namespace", name=op.f("uq_projects_namespace")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_api_tokens_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_project_id"), ["project_id"], unique=False)

    op.create_table(
        "datasets",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.String(length=2000), nullable=False),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_datasets_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_datasets_project_id_name")),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.String(length=2000), nullable=False),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_experiments_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_experiments")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_experiments_project_id_name")),
    )
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_experiments_project_id"), ["project_id"], unique=False)

    op.create_table(
        "lineage_edges",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("src_type", sa.String(length=16), nullable=False),
        sa.Column("src_id", sa.BigInteger(), nullable=False),
        sa.Column("dst_type", sa.String(length=16), nullable=False),
        sa.Column("dst_id", sa.BigInteger(), nullable=False),
        sa.Column("relation", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_lineage_edges_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_edges")),
        sa.UniqueConstraint(
            "src_type",
            "src_id",
            "dst_type",
            "dst_id",
            name=op.f("uq_lineage_edges_src_type_src_id_dst_type_dst_id"),
        ),
    )
    with op.batch_alter_table("lineage_edges", schema=None) as batch_op:
        batch_op.create_index("ix_lineage_edges_dst", ["dst_type", "dst_id"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "experiment_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "manifest",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("spec_digest", sa.String(length=80), nullable=False),
        sa.Column("code_ref", sa.String(length=300), nullable=False),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("k8s_namespace", sa.String(length=63), nullable=True),
        sa.Column("k8s_name", sa.String(length=253), nullable=True),
        sa.Column("k8s_uid", sa.String(length=64), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("latest_step", sa.BigInteger(), nullable=True),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("started_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.Column("updated_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_runs_experiment_id_experiments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_runs_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("k8s_uid", name=op.f("uq_runs_k8s_uid")),
        sa.UniqueConstraint(
            "project_id", "kind", "name", name=op.f("uq_runs_project_id_kind_name")
        ),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_experiment_created", ["experiment_id", "created_at"], unique=False
        )
        batch_op.create_index("ix_runs_project_phase", ["project_id", "phase"], unique=False)

    op.create_table(
        "attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("start_reason", sa.String(length=32), nullable=False),
        sa.Column(
            "resumed_from_checkpoint_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=True,
        ),
        sa.Column("end_reason", sa.String(length=64), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("started_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.Column("ended_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_attempts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("run_id", "number", name=op.f("uq_attempts_run_id_number")),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attempts_run_id"), ["run_id"], unique=False)

    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "dataset_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("uri", sa.String(length=2000), nullable=False),
        sa.Column("digest", sa.String(length=100), nullable=False),
        sa.Column("record_count", sa.BigInteger(), nullable=True),
        sa.Column(
            "schema",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "produced_by_run_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=True,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_versions_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["produced_by_run_id"],
            ["runs.id"],
            name=op.f("fk_dataset_versions_produced_by_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_versions")),
        sa.UniqueConstraint(
            "dataset_id", "digest", name=op.f("uq_dataset_versions_dataset_id_digest")
        ),
        sa.UniqueConstraint(
            "dataset_id", "version", name=op.f("uq_dataset_versions_dataset_id_version")
        ),
    )
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_dataset_versions_produced_by_run_id"),
            ["produced_by_run_id"],
            unique=False,
        )

    op.create_table(
        "metric_series",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("key", sa.String(length=250), nullable=False),
        sa.Column("point_count", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("last_value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_metric_series_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_series")),
        sa.UniqueConstraint("run_id", "key", name=op.f("uq_metric_series_run_id_key")),
    )
    op.create_table(
        "run_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_events_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_events")),
    )
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.create_index("ix_run_events_run_id_id", ["run_id", "id"], unique=False)

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "attempt_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("uri", sa.String(length=2000), nullable=False),
        sa.Column("digest", sa.String(length=100), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", crucible.db.types.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name=op.f("fk_checkpoints_attempt_id_attempts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_checkpoints_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint("run_id", "step", name=op.f("uq_checkpoints_run_id_step")),
    )
    # attempts and checkpoints reference each other; this edge is added once both exist.
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_attempts_resumed_from_checkpoint_id_checkpoints"),
            "checkpoints",
            ["resumed_from_checkpoint_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_table(
        "metric_points",
        sa.Column(
            "series_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("wall_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["metric_series.id"],
            name=op.f("fk_metric_points_series_id_metric_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "step", name=op.f("pk_metric_points")),
    )
    op.create_table(
        "eval_results",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "checkpoint_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "eval_run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("suite", sa.String(length=63), nullable=False),
        sa.Column(
            "scores",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_eval_results_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["eval_run_id"],
            ["runs.id"],
            name=op.f("fk_eval_results_eval_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_results")),
        sa.UniqueConstraint(
            "checkpoint_id",
            "suite",
            "eval_run_id",
            name=op.f("uq_eval_results_checkpoint_id_suite_eval_run_id"),
        ),
    )
    with op.batch_alter_table("eval_results", schema=None) as batch_op:
        batch_op.create_index("ix_eval_results_checkpoint", ["checkpoint_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_eval_results_eval_run_id"), ["eval_run_id"], unique=False
        )

    op.create_table(
        "run_inputs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "dataset_version_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=True,
        ),
        sa.Column(
            "checkpoint_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("created_at", crucible.db.types.UtcDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_run_inputs_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["dataset_version_id"],
            ["dataset_versions.id"],
            name=op.f("fk_run_inputs_dataset_version_id_dataset_versions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_inputs_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_inputs")),
        sa.UniqueConstraint(
            "run_id", "checkpoint_id", name=op.f("uq_run_inputs_run_id_checkpoint_id")
        ),
        sa.UniqueConstraint(
            "run_id", "dataset_version_id", name=op.f("uq_run_inputs_run_id_dataset_version_id")
        ),
    )
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_inputs_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_attempts_resumed_from_checkpoint_id_checkpoints"), type_="foreignkey"
        )
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_inputs_run_id"))

    op.drop_table("run_inputs")
    with op.batch_alter_table("eval_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_results_eval_run_id"))
        batch_op.drop_index("ix_eval_results_checkpoint")

    op.drop_table("eval_results")
    op.drop_table("metric_points")
    op.drop_table("checkpoints")
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.drop_index("ix_run_events_run_id_id")

    op.drop_table("run_events")
    op.drop_table("metric_series")
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_versions_produced_by_run_id"))

    op.drop_table("dataset_versions")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_run_id"))

    op.drop_table("attempts")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_project_phase")
        batch_op.drop_index("ix_runs_experiment_created")

    op.drop_table("runs")
    with op.batch_alter_table("lineage_edges", schema=None) as batch_op:
        batch_op.drop_index("ix_lineage_edges_dst")

    op.drop_table("lineage_edges")
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_experiments_project_id"))

    op.drop_table("experiments")
    op.drop_table("datasets")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_project_id"))

    op.drop_table("api_tokens")
    op.drop_table("projects")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_unsent")

    op.drop_table("outbox")
    op.drop_table("idempotency_records")
