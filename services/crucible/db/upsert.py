"""Race-safe inserts that work on both databases (Postgres and SQLite)."""

from typing import Any

from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from crucible.db.tables import Base


def insert_ignoring_duplicates(session: Session, table: type[Base], **values: Any) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: a retried or concurrent identical write adds nothing
    and, unlike catching IntegrityError, leaves the surrounding transaction usable."""
    insert = postgres_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(table).values(**values).on_conflict_do_nothing())
