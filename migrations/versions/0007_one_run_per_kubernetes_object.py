"""one run per kubernetes object

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 16:10:00.000000

A Kubernetes run's namespace is its project's, so (namespace, kind, name) names one object
and one run. Runs submitted before the API enforced that may name another project's
namespace; the upgrade stops and names them rather than picking one.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "uq_runs_k8s_namespace_kind_k8s_name"


def upgrade() -> None:
    clashes = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT k8s_namespace, kind, k8s_name, COUNT(*) FROM runs "
                "WHERE k8s_namespace IS NOT NULL AND k8s_name IS NOT NULL "
                "GROUP BY k8s_namespace, kind, k8s_name HAVING COUNT(*) > 1"
            )
        )
        .all()
    )
    if clashes:
        named = ", ".join(f"{kind} {ns}/{name} ({count} runs)" for ns, kind, name, count in clashes)
        raise RuntimeError(
            f"runs of different projects name the same Kubernetes objects: {named}. Keep one "
            "run of each (delete the others' rows in the runs table), then upgrade again."
        )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_unique_constraint(CONSTRAINT, ["k8s_namespace", "kind", "k8s_name"])


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(CONSTRAINT, type_="unique")
