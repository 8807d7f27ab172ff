"""Every route of the OpenAPI schema while Postgres is down: 503 with Retry-After, then the
same app serves again once Postgres is back, with no restart.

The load test (test_postgres_restart.py) samples a few routes under traffic; this one walks
them all, so a route that turns a database error into a 500 (in a dependency, at commit,
before a stream starts) is caught the day it is added.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import load_settings
from tests.api.conftest import PrivatePostgres
from tests.conftest import ADMIN_TOKEN, bearer
from tests.route_examples import concrete_path, example_bodies, query_for

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

# What answers without the database: liveness, and the embedded mode's sign-in (a 404 on
# Postgres before any query).
NEEDS_NO_DATABASE = {"healthz", "redeemSignInCode"}


@pytest.fixture
def app_on_private_postgres(private_postgres: PrivatePostgres, tmp_path: Path) -> Iterator[FastAPI]:
    settings = load_settings(
        home=tmp_path / "home",
        database_url=private_postgres.fresh_database(),
        admin_token=ADMIN_TOKEN,
        broker_url=None,
        db_pool_timeout_seconds=2,
    )
    application = create_app(settings)
    yield application
    application.state.engine.dispose()


def test_every_route_answers_503_while_postgres_is_down_and_recovers(
    app_on_private_postgres: FastAPI, private_postgres: PrivatePostgres
) -> None:
    app = app_on_private_postgres
    ids = dict.fromkeys(
        (
            "project",
            "run",
            "experiment",
            "checkpoint",
            "version",
            "dataset",
            "artifact",
            "token",
            "deployment",
            "sweep",
        ),
        1,
    )
    bodies = example_bodies(ids)
    with TestClient(app, headers=bearer(ADMIN_TOKEN)) as client:
        assert client.get("/api/v1/projects").status_code == 200  # the pool holds connections
        private_postgres.services("stop-postgres", "immediate")
        try:
            answers = {}
            for path, operations in app.openapi()["paths"].items():
                for method, operation in operations.items():
                    name = operation["operationId"]
                    if name in NEEDS_NO_DATABASE:
                        continue
                    if "requestBody" in operation:
                        assert name in bodies, f"add an example body for {name} to route_examples"
                    response = client.request(
                        method.upper(),
                        concrete_path(path, ids),
                        params=query_for(ids),
                        json=bodies.get(name),
                    )
                    answers[f"{method.upper()} {path}"] = (
                        response.status_code,
                        response.headers.get("retry-after"),
                    )
        finally:
            private_postgres.services("start-postgres")
        recovered = client.get("/api/v1/projects")
    wrong = {route: answer for route, answer in answers.items() if answer[0] != 503}
    assert wrong == {}
    without_retry_after = [r for r, (_, after) in answers.items() if not (after or "").isdigit()]
    assert without_retry_after == []
    assert len(answers) >= 50
    assert recovered.status_code == 200, recovered.text
    print(f"\noutage: {len(answers)} routes, every one 503 with Retry-After; recovered")
