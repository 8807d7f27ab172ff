"""ids never reused: SQLite tables whose ids name folders or appear in URLs AUTOINCREMENT

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 19:00:00.000000

Without AUTOINCREMENT, SQLite gives a new row the highest id + 1, so deleting the newest
project (or run) hands its id to the next one, which then finds the deleted one's
`runs/<id>/` logs and links. Each table is copied into one declared AUTOINCREMENT (batch
mode's move and copy); SQLite records the highest id copied, and counts on from there.
Postgres' sequences never hand out an id twice: nothing to do there.
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import Connection

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "projects",
    "api_tokens",
    "experiments",
    "runs",
    "attempts",
    "run_events",
    "run_profile_requests",
    "datasets",
    "dataset_versions",
    "checkpoints",
    "eval_results",
    "artifacts",
    "deployments",
    "sweeps",
)


def upgrade() -> None:
    _recreate(autoincrement=True)


def downgrade() -> None:
    _recreate(autoincrement=False)


def _recreate(*, autoincrement: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    with _foreign_keys_off(bind):
        for table in TABLES:
            with op.batch_alter_table(
                table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
            ):
                pass
        problems = [] if op.get_context().as_sql else _foreign_key_problems(bind)
        if problems:
            raise RuntimeError(f"the copied tables break their foreign keys: {problems[:5]}")


def _foreign_key_problems(bind: Connection) -> list[object]:
    return list(bind.exec_driver_sql("PRAGMA foreign_key_check").fetchall())


class _foreign_keys_off:
    """Foreign keys off while the tables are copied: with them on, dropping a parent table
    (the copy's last step) deletes every row that refers to it, by ON DELETE CASCADE.

    SQLite ignores the pragma inside a transaction, so the revisions before this one are
    committed first (as with one transaction per revision), and this one before foreign
    keys come back on for the connection, which the pool hands out again."""

    def __init__(self, bind: Connection) -> None:
        self.bind = bind
        # Writing SQL out (alembic --sql) has no connection: whoever runs it sets the pragma.
        offline = op.get_context().as_sql
        self.driver = None if offline else bind.connection.driver_connection
        self.was_on = not offline and bool(bind.exec_driver_sql("PRAGMA foreign_keys").scalar())

    def __enter__(self) -> None:
        if self.was_on:
            self._set("OFF")

    def __exit__(self, *exc: object) -> None:
        if not self.was_on:
            return
        if exc[0] is not None and self.driver is not None and self.driver.in_transaction:
            self.driver.rollback()  # the caller's rollback would come after the pragma
        self._set("ON")

    def _set(self, state: str) -> None:
        assert self.driver is not None
        if self.driver.in_transaction:
            self.driver.commit()
        self.bind.exec_driver_sql(f"PRAGMA foreign_keys={state}")
        now = "ON" if self.bind.exec_driver_sql("PRAGMA foreign_keys").scalar() else "OFF"
        if now != state:
            raise RuntimeError(f"could not turn SQLite's foreign keys {state}")
