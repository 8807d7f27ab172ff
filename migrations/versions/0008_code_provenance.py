"""code provenance

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 19:00:00.000000

Where a run's code came from (the git state at submission), and per attempt the image its
pod ran with the digest the kubelet resolved, and the packages its workload reported.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("code", _json(), nullable=True))
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("image", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("image_id", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("packages", _json(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("packages")
        batch_op.drop_column("image_id")
        batch_op.drop_column("image")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("code")
