"""The auth matrix: no token, wrong token, another project's token, and roles."""

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event, select

from crucible.api.app import create_app
from crucible.core.signin import issue_code
from crucible.db.tables import ApiToken
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer, make_project, make_token, submit


def test_every_api_route_needs_a_token(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path, operations in schema["paths"].items():
        if not path.startswith("/api/v1"):
            continue
        concrete = path.replace("{", "").replace("}", "").replace("_id", "").replace("number", "1")
        concrete = "/".join(
            "1"
            if part
            in {"run", "project", "experiment", "token", "dataset", "version", "checkpoint", "id"}
            else part
            for part in concrete.split("/")
        )
        for method in operations:
            response = client.request(method.upper(), concrete)
            assert response.status_code == 401, (method, path, response.status_code)


def test_wrong_token_is_401(client: TestClient) -> None:
    response = client.get("/api/v1/projects", headers=bearer("cru_nope"))
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.fixture
def two_projects(admin: TestClient) -> dict[str, str]:
    make_project(admin, "alpha")
    make_project(admin, "beta")
    submit(admin, project="alpha", name="alpha-run")
    submit(admin, project="beta", name="beta-run")
    return {
        "alpha-viewer": make_token(admin, "alpha", "viewer"),
        "alpha-editor": make_token(admin, "alpha", "editor"),
        "alpha-admin": make_token(admin, "alpha", "admin"),
        "beta-editor": make_token(admin, "beta", "editor"),
    }


def _run_id(admin: TestClient, project: str) -> int:
    run_id: int = admin.get("/api/v1/runs", params={"project": project}).json()["items"][0]["id"]
    return run_id


def test_other_projects_runs_are_invisible(
    client: TestClient, admin: TestClient, two_projects: dict[str, str]
) -> None:
    beta_run = _run_id(admin, "beta")
    alpha_editor = bearer(two_projects["alpha-editor"])
    assert client.get(f"/api/v1/runs/{beta_run}", headers=alpha_editor).status_code == 404
    assert client.post(f"/api/v1/runs/{beta_run}/cancel", headers=alpha_editor).status_code == 404
    listed = client.get("/api/v1/runs", headers=alpha_editor).json()["items"]
    assert [r["name"] for r in listed] == ["alpha-run"]
    assert (
        client.get("/api/v1/runs", params={"project": "beta"}, headers=alpha_editor).status_code
        == 404
    )
    projects = client.get("/api/v1/projects", headers=alpha_editor).json()["items"]
    assert [p["name"] for p in projects] == ["alpha"]


def test_roles_gate_writes(
    client: TestClient, admin: TestClient, two_projects: dict[str, str]
) -> None:
    alpha_run = _run_id(admin, "alpha")
    viewer = bearer(two_projects["alpha-viewer"])
    editor = bearer(two_projects["alpha-editor"])
    assert client.get(f"/api/v1/runs/{alpha_run}", headers=viewer).status_code == 200
    assert client.post(f"/api/v1/runs/{alpha_run}/cancel", headers=viewer).status_code == 403
    assert client.post(f"/api/v1/runs/{alpha_run}/cancel", headers=editor).status_code == 200
    token = {"name": "x", "project": "alpha", "role": "viewer"}
    assert client.post("/api/v1/tokens", json=token, headers=editor).status_code == 403
    alpha_admin = bearer(two_projects["alpha-admin"])
    assert client.post("/api/v1/tokens", json=token, headers=alpha_admin).status_code == 201
    assert (
        client.post(
            "/api/v1/tokens", json={**token, "project": "beta"}, headers=alpha_admin
        ).status_code
        == 404
    )
    assert (
        client.post("/api/v1/projects", json={"name": "gamma"}, headers=alpha_admin).status_code
        == 403
    )


def test_revoked_token_stops_working(client: TestClient, admin: TestClient) -> None:
    make_project(admin, "alpha")
    response = admin.post("/api/v1/tokens", json={"name": "t", "project": "alpha"})
    assert response.headers["cache-control"] == "no-store"  # the body is a credential
    created = response.json()
    assert client.get("/api/v1/projects", headers=bearer(created["token"])).status_code == 200
    assert admin.delete(f"/api/v1/tokens/{created['id']}").status_code == 200
    assert client.get("/api/v1/projects", headers=bearer(created["token"])).status_code == 401


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_tokens_are_hashed_with_sha256_and_looked_up_by_their_hash(
    app: FastAPI, admin: TestClient, client: TestClient
) -> None:
    make_project(admin, "alpha")
    raw = make_token(admin, "alpha", "viewer")
    factory = app.state.session_factory
    with factory() as session:
        row = session.scalars(select(ApiToken).where(ApiToken.project_id.is_not(None))).one()
        stored = [str(getattr(row, c.key)) for c in ApiToken.__table__.columns]
    assert row.token_hash == sha256(raw)
    # Only its first characters are kept in the clear (the prefix lists show); not the rest.
    assert row.prefix == raw[: len(row.prefix)] and len(row.prefix) <= 8
    assert not any(raw[len(row.prefix) :] in value for value in stored)

    # What the database is asked for is the hash: the token itself never reaches it.
    parameters: list[str] = []

    def record(*args: Any) -> None:
        parameters.append(repr(args[3]))  # (connection, cursor, statement, parameters, ...)

    event.listen(app.state.engine, "before_cursor_execute", record)
    try:
        assert client.get("/api/v1/projects", headers=bearer(raw)).status_code == 200
    finally:
        event.remove(app.state.engine, "before_cursor_execute", record)
    assert any(sha256(raw) in p for p in parameters), parameters
    assert not any(raw[len(row.prefix) :] in p for p in parameters), parameters

    # Whatever hashes to the stored value is the credential, and nothing else is.
    other = "cru_" + "x" * 43
    with factory() as session:
        session.get_one(ApiToken, row.id).token_hash = sha256(other)
        session.commit()
    assert client.get("/api/v1/projects", headers=bearer(raw)).status_code == 401
    assert client.get("/api/v1/projects", headers=bearer(other)).status_code == 200


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The pairs hmac.compare_digest is given while the test runs."""
    pairs: list[set[str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        pairs.append({x.decode() if isinstance(x, bytes) else x for x in (a, b)})
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    return pairs


def test_the_admin_token_is_compared_in_constant_time(
    client: TestClient, compared: list[set[str]]
) -> None:
    close = ADMIN_TOKEN[:-1] + "x"  # as long as the real one, one character off
    for token, status in ((close, 401), (ADMIN_TOKEN, 200)):
        compared.clear()
        assert client.get("/api/v1/projects", headers=bearer(token)).status_code == status
        assert {token, ADMIN_TOKEN} in compared, compared


# Sign-in codes are the embedded mode's, which is SQLite's.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sign_in_codes_are_compared_in_constant_time(
    client: TestClient, settings: Settings, compared: list[set[str]]
) -> None:
    code = issue_code(settings.home)
    for guess, status in (("not-the-code", 401), (code, 200)):
        compared.clear()
        response = client.post("/api/v1/auth/sign-in-code", json={"code": guess})
        assert response.status_code == status, response.text
        assert {sha256(guess), sha256(code)} in compared, compared


def test_delete_project_refuses_when_runs_exist(admin: TestClient) -> None:
    project_id = make_project(admin, "alpha")["id"]
    submit(admin, project="alpha")
    refused = admin.delete(f"/api/v1/projects/{project_id}")
    assert refused.status_code == 409 and "force" in refused.json()["detail"]
    assert admin.delete(f"/api/v1/projects/{project_id}", params={"force": True}).status_code == 200
    assert admin.get(f"/api/v1/projects/{project_id}").status_code == 404


def test_a_servers_longest_token_lifetime_bounds_every_new_token(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"token_max_lifetime_days": 30}))
    try:
        with TestClient(app, headers=bearer(ADMIN_TOKEN)) as admin:
            make_project(admin, "alpha")
            too_long = admin.post(
                "/api/v1/tokens",
                json={"name": "t", "project": "alpha", "expires_at": "2099-01-01T00:00:00Z"},
            )
            assert too_long.status_code == 422, too_long.text
            assert "CRUCIBLE_TOKEN_MAX_LIFETIME_DAYS" in too_long.json()["detail"][0]["msg"]
            unbounded = admin.post("/api/v1/tokens", json={"name": "u", "project": "alpha"})
            assert unbounded.status_code == 201, unbounded.text
            expires = datetime.fromisoformat(unbounded.json()["expires_at"])
            assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
    finally:
        app.state.engine.dispose()
