"""Tenancy over the whole API: an admin token of project A, aimed at project B's objects on
every route of the OpenAPI schema, gets 403 or 404; what it may list never shows B; and
afterwards every row of the database is as it was.

Routes come from the schema itself, so a new route is covered the day it is added: one
with a request body fails here until it has a valid example body in tests/route_examples.py.
"""

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from crucible.db.tables import Base
from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token, training_run
from tests.route_examples import (
    DIGEST,
    MARKER,
    PUBLIC,
    concrete_path,
    example_bodies,
    project_b,
    query_for,
)


@pytest.fixture
def alpha_admin(admin: TestClient, app: FastAPI) -> TestClient:
    make_project(admin, "alpha")
    admin.post("/api/v1/runs", json={"project": "alpha", "manifest": training_run(name="a-run")})
    return TestClient(app, headers=bearer(make_token(admin, "alpha", "admin")))


def every_row(app: FastAPI) -> dict[str, list[dict[str, Any]]]:
    """Each table's rows as the database holds them (a new table joins automatically)."""
    with app.state.engine.connect() as connection:
        return {
            table.name: [
                dict(row._mapping)
                for row in connection.execute(select(table).order_by(*table.primary_key))
            ]
            for table in Base.metadata.sorted_tables
        }


def test_project_a_cannot_reach_project_b_on_any_route(
    admin: TestClient, alpha_admin: TestClient, app: FastAPI
) -> None:
    b = project_b(admin)
    bodies = example_bodies(b)
    before = every_row(app)
    checked = 0
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            name = operation["operationId"]
            if name in PUBLIC:
                continue
            body = None
            if "requestBody" in operation:
                assert name in bodies, f"add an example body for {name} to tests/route_examples.py"
                body = bodies[name]
            response = alpha_admin.request(
                method.upper(), concrete_path(path, b), params=query_for(b), json=body
            )
            where = f"{method.upper()} {path} ({name}) answered {response.status_code}"
            # A refusal may echo the name it was given ("project 'zzbeta' not found").
            if response.status_code not in (403, 404):
                # Only a list that leaves B out may answer: nothing of B in it.
                assert method == "get" and response.status_code == 200, where
                assert MARKER not in response.text, f"{where} with B's data: {response.text}"
            checked += 1
    assert checked >= 50

    # Nothing of B changed, nor anything else: B's project, experiment, run, attempt, events,
    # metrics, checkpoint, dataset, inputs, eval and token are each row for row as they were,
    # and A's refused requests left no row behind.
    after = every_row(app)
    changed = {
        name: {
            "gone or changed": [r for r in rows if r not in after[name]],
            "new or changed": [r for r in after[name] if r not in rows],
        }
        for name, rows in before.items()
        if after[name] != rows
    }
    assert not changed, f"A's requests changed rows: {changed}"


def test_project_a_cannot_link_its_run_to_project_b_objects(
    admin: TestClient, alpha_admin: TestClient
) -> None:
    b = project_b(admin)
    a_run = alpha_admin.get("/api/v1/runs").json()["items"][0]["id"]
    attempts = [
        ("post", f"/api/v1/runs/{a_run}/inputs", {"dataset_version_id": b["version"]}),
        ("post", f"/api/v1/runs/{a_run}/inputs", {"checkpoint_id": b["checkpoint"]}),
        ("post", f"/api/v1/runs/{a_run}/attempts", {"resumed_from_checkpoint_id": b["checkpoint"]}),
        (
            "post",
            "/api/v1/datasets/versions",
            {
                "project": "alpha",
                "name": "d",
                "uri": f"{SHARED_BUCKET}/a/d",
                "digest": DIGEST,
                "produced_by_run_id": b["run"],
            },
        ),
        (
            "post",
            "/api/v1/evals",
            {
                "checkpoint_id": b["checkpoint"],
                "suite": "s",
                "scores": {"a": 1.0},
                "eval_run_id": a_run,
            },
        ),
    ]
    for method, path, body in attempts:
        response = alpha_admin.request(method.upper(), path, json=body)
        assert response.status_code in (403, 404, 409, 422), (path, body, response.text)
    lineage = alpha_admin.get(f"/api/v1/lineage/run/{a_run}").json()
    assert MARKER not in str(lineage)
