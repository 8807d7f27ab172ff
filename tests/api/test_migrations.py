"""Alembic is the only way the schema changes: round-trips, and models equal the head."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from crucible.db import schema
from crucible.db.engine import build_engine
from crucible.db.tables import ApiToken, Base, Experiment, Project
from crucible.settings import Settings
from tests.conftest import postgres_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def scratch_engine(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Engine]:
    """An empty database of its own, so downgrading never disturbs other tests."""
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path}/migrations.db")
        yield engine
        engine.dispose()
        return
    url = make_url(postgres_url())
    # Named after the test database, so suites on different test databases never share it.
    scratch = f"{url.database}_migrations"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch}"'))
        connection.execute(text(f'CREATE DATABASE "{scratch}"'))
    engine = create_engine(url.set(database=scratch))
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch}"'))
    admin.dispose()


def test_upgrade_downgrade_round_trip(scratch_engine: Engine) -> None:
    schema.upgrade(scratch_engine)
    assert schema.current_revision(scratch_engine) == schema.head_revision()
    assert "runs" in inspect(scratch_engine).get_table_names()
    schema.downgrade(scratch_engine, "base")
    assert schema.current_revision(scratch_engine) is None
    assert set(inspect(scratch_engine).get_table_names()) <= {"alembic_version"}
    schema.upgrade(scratch_engine)
    assert schema.current_revision(scratch_engine) == schema.head_revision()


def test_models_match_head_revision(scratch_engine: Engine) -> None:
    schema.upgrade(scratch_engine)
    with scratch_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == [], f"tables differ from migrations; add a revision: {diff}"


def test_server_refuses_a_schema_behind(scratch_engine: Engine) -> None:
    with pytest.raises(schema.SchemaBehind, match="crucible db upgrade"):
        schema.ensure_at_head(scratch_engine)


def test_sqlite_tables_are_copied_to_autoincrement_keeping_every_row(tmp_path: Path) -> None:
    """On the server's own engine (foreign keys on, so dropping a parent table would delete
    its children), from a revision before the one before: every row stays, the tables
    never hand a deleted id out again, and foreign keys are back on afterwards."""
    engine = build_engine(Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path}/up.db"))
    schema.upgrade(engine, "0014")
    with Session(engine) as session, session.begin():
        for name in ("old", "newest"):
            project = Project(name=name, namespace=name)
            session.add(project)
            session.flush()
            session.add(Experiment(project_id=project.id, name="e"))
            session.add(
                ApiToken(
                    project_id=project.id, name="t", role="viewer", token_hash=name, prefix="p"
                )
            )
    schema.upgrade(engine)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        counts = [
            connection.execute(text(f"SELECT count(*) FROM {table}")).scalar()
            for table in ("projects", "experiments", "api_tokens")
        ]
        assert counts == [2, 2, 2]
        declared: dict[str, str] = dict(
            connection.execute(text("SELECT name, sql FROM sqlite_master")).tuples().all()
        )
    plain = [table for table in NEVER_REUSED_TABLES if "AUTOINCREMENT" not in declared[table]]
    assert plain == []
    with Session(engine) as session, session.begin():
        session.delete(session.scalars(select(Project).where(Project.name == "newest")).one())
    with Session(engine) as session, session.begin():
        assert session.scalar(select(func.count()).select_from(Experiment)) == 1  # cascaded
        project = Project(name="next", namespace="next")
        session.add(project)
        session.flush()
        assert project.id == 3
    engine.dispose()


NEVER_REUSED_TABLES = [
    table.name for table in Base.metadata.sorted_tables if table.kwargs.get("sqlite_autoincrement")
]
