"""Alembic is the only way the schema changes: round-trips, and models equal the head."""

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url

from crucible.db import schema
from crucible.db.tables import Base
from tests.conftest import postgres_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def scratch_engine(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Engine]:
    """An empty database of its own, so downgrading never disturbs other tests."""
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path}/migrations.db")  # type: ignore[str-bytes-safe]
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
