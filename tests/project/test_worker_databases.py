"""tests/conftest.py's Postgres database per pytest-xdist worker: scripts/test runs the local
stage on two workers, and each test's TRUNCATE must only ever empty its own worker's tables."""

import pytest
from sqlalchemy import create_engine, make_url, text

from tests.conftest import _shared_postgres_url, postgres_url

pytestmark = pytest.mark.postgres


def _exists(name: str) -> bool:
    engine = create_engine(_shared_postgres_url())
    try:
        with engine.connect() as connection:
            query = text("SELECT 1 FROM pg_database WHERE datname = :name")
            return connection.execute(query, {"name": name}).first() is not None
    finally:
        engine.dispose()


def _drop(name: str) -> None:
    engine = create_engine(_shared_postgres_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


def test_each_worker_gets_a_database_of_its_own_created_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared = make_url(_shared_postgres_url()).database
    names = {}
    try:
        for worker in ("gw97", "gw98"):
            monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
            names[worker] = make_url(postgres_url()).database
        assert names == {"gw97": f"{shared}_gw97", "gw98": f"{shared}_gw98"}
        assert all(_exists(name) for name in names.values())
        monkeypatch.delenv("PYTEST_XDIST_WORKER")
        assert postgres_url() == _shared_postgres_url()
    finally:
        for name in names.values():
            _drop(name)
