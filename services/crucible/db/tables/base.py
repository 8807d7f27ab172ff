from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

# Deterministic constraint names, so Alembic migrations can drop and alter them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


NEVER_REUSED = {"sqlite_autoincrement": True}
"""Table options of a table whose ids name folders (`runs/<id>/`) or appear in URLs and
cursors: SQLite otherwise hands a deleted row's id (the highest) to the next row, which
would then find the deleted one's files, logs and links. Postgres' sequences never reuse
one."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
