"""Shared fixtures: the control plane on SQLite and on the real Postgres of scripts/services.

`live_server`/`live_api` are a real `crucible server` process (SQLite, one per test module)
and an SDK client of it, for tests of code that talks to the control plane over HTTP.

Tests that take `database_url` (directly or through `app`/`admin`) run once per backend.
The Postgres variant is marked `postgres` and fails, never skips, when Postgres is down:
run `eval "$(scripts/services up)"` first, or deselect with `-m "not postgres"`. Under
pytest-xdist each worker has a database of its own on that server (`<name>_gw0`, ...), so
workers never truncate each other's tables.
"""

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text

from crucible.api.app import create_app
from crucible.client import CrucibleClient
from crucible.db import schema
from crucible.db.tables import Base
from crucible.settings import Settings, load_settings
from tests import checkpoint_files
from tests.object_store import forget_s3_clients, s3  # noqa: F401 - fixtures, for every test
from tests.servers import LocalServer, local_server

# The cluster's fixtures (`cluster`, `namespace`, ...) serve every folder that tests on it.
pytest_plugins = ["tests.k8s.fixtures"]

ADMIN_TOKEN = "cru_test-admin-token"
SHARED_BUCKET = "s3://crucible-test"
"""A storage root of the test servers outside every project's folder: datasets and artifacts
may be registered there (`f"{SHARED_BUCKET}/d"`), checkpoints may not (retention deletes them)."""
DEFAULT_PG_URL = "postgresql+psycopg://crucible:crucible@127.0.0.1:15432/crucible_test"


def pytest_itemcollected(item: pytest.Item) -> None:
    # A test taking `s3` uses the shared S3 server: marked, so that `-m "not objectstore"`
    # leaves it out and scripts/test (tests/needs.py) starts the server for it.
    if "s3" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.objectstore)


def _shared_postgres_url() -> str:
    return os.environ.get("CRUCIBLE_TEST_DATABASE_URL", DEFAULT_PG_URL)


def postgres_url() -> str:
    """This process's test database: the configured one, or under pytest-xdist the worker's
    (created on first use)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return _shared_postgres_url()
    return _worker_database(worker)


def _fail_unreachable(url: str, exc: Exception) -> NoReturn:
    shown = make_url(url).render_as_string(hide_password=True)
    pytest.fail(f"Postgres at {shown} is not reachable ({exc}); run scripts/services up")


@functools.cache
def _worker_database(worker: str) -> str:
    shared = _shared_postgres_url()
    url = make_url(shared)
    url = url.set(database=f"{url.database}_{worker}")
    admin = create_engine(shared, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": url.database}
            ).first()
            if not exists:
                connection.execute(text(f'CREATE DATABASE "{url.database}"'))
    except Exception as exc:
        _fail_unreachable(shared, exc)
    finally:
        admin.dispose()
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def _postgres_at_head() -> str:
    """Upgrade the test database once; each test then starts from empty tables."""
    url = postgres_url()
    try:
        engine = create_engine(url)
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        _fail_unreachable(url, exc)
    schema.upgrade(engine)
    engine.dispose()
    return url


def _truncate_all(url: str) -> None:
    engine = create_engine(url)
    names = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'crucible.db'}"
    url: str = request.getfixturevalue("_postgres_at_head")
    _truncate_all(url)
    return url


# For tests that only mean something on Postgres (row locks, real concurrency).
postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    # No broker: the failed-authentication throttle then counts per app, not across tests in
    # the shared Redis of the test stack.
    return load_settings(
        home=tmp_path / "home",
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        broker_url=None,
        storage_roots=[checkpoint_files.ROOT.as_uri(), SHARED_BUCKET],
        # Each test's own: under the shared root, tests whose databases both start at id 1
        # wrote into one another's experiment folders.
        mlflow_artifact_root=(tmp_path / "home" / "mlflow-artifacts").as_uri(),
    )


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    if not settings.is_sqlite:
        schema.upgrade(create_engine(settings.resolved_database_url))
    application = create_app(settings)
    yield application
    application.state.engine.dispose()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """An unauthenticated client."""
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def admin(app: FastAPI) -> Iterator[TestClient]:
    """A client holding the global admin token."""
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_project(admin: TestClient, name: str = "vision") -> dict[str, object]:
    response = admin.post("/api/v1/projects", json={"name": name})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def make_token(admin: TestClient, project: str, role: str) -> str:
    response = admin.post(
        "/api/v1/tokens", json={"name": f"{project}-{role}", "project": project, "role": role}
    )
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def training_run(name: str = "sft-1", experiment: str = "exp", **spec: object) -> dict[str, object]:
    """A minimal valid TrainingRun manifest."""
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": experiment, **spec},
    }


def submit(admin: TestClient, project: str = "vision", name: str = "sft-1") -> dict[str, object]:
    manifest = training_run(name=name)
    response = admin.post("/api/v1/runs", json={"project": project, "manifest": manifest})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


@pytest.fixture(scope="module")
def live_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalServer]:
    with local_server(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as up:
        yield up


@pytest.fixture
def live_api(live_server: LocalServer) -> Iterator[CrucibleClient]:
    with CrucibleClient(live_server.url, live_server.token) as api:
        yield api
