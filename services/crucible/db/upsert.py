"""Race-safe inserts that work on both databases (Postgres and SQLite)."""

from typing import Any

from sqlalchemy.dialects.postgresql import Insert as PostgresInsert
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from crucible.db.tables import Base


def insert_statement(session: Session, table: type[Base]) -> PostgresInsert | SqliteInsert:
    """An INSERT of the session's dialect, which has `on_conflict_do_nothing`."""
    if session.get_bind().dialect.name == "postgresql":
        return postgres_insert(table)
    return sqlite_insert(table)


def insert_ignoring_duplicates(session: Session, table: type[Base], **values: Any) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: a retried or concurrent identical write adds nothing
    and, unlike catching IntegrityError, leaves the surrounding transaction usable."""
    session.execute(insert_statement(session, table).values(**values).on_conflict_do_nothing())
