"""The embedded mode's one-time sign-in link: a code printed by `crucible up`, traded once."""

import os
import stat
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from crucible.core.signin import CODE_TTL, code_file, issue_code
from crucible.settings import Settings
from tests.conftest import bearer, postgres_only

URL = "/api/v1/auth/sign-in-code"
# Sign-in codes are the embedded mode's, which is SQLite's.
embedded = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@embedded
def test_a_code_signs_in_once(client: TestClient, settings: Settings) -> None:
    code = issue_code(settings.home)
    assert stat.S_IMODE(os.stat(code_file(settings.home)).st_mode) == 0o600
    assert code not in code_file(settings.home).read_text()  # only its hash is kept

    first = client.post(URL, json={"code": code})
    assert first.status_code == 200, first.text
    assert first.headers["cache-control"] == "no-store"  # the body is an admin token
    session = first.json()
    assert session["role"] == "admin" and session["expires_at"] is not None
    projects = client.get("/api/v1/projects", headers=bearer(session["token"]))
    assert projects.status_code == 200

    again = client.post(URL, json={"code": code})
    assert again.status_code == 401
    assert "used already or has expired" in again.json()["detail"]
    # An unauthenticated caller learns nothing of the server's files.
    assert str(settings.home) not in again.json()["detail"]


@embedded
def test_a_wrong_code_is_refused_and_leaves_the_real_one_usable(
    client: TestClient, settings: Settings
) -> None:
    code = issue_code(settings.home)
    wrong = client.post(URL, json={"code": "not-the-code"})
    assert wrong.status_code == 401
    assert "copy the whole link" in wrong.json()["detail"]
    assert client.post(URL, json={"code": code}).status_code == 200


@embedded
def test_a_new_code_replaces_the_old_and_an_expired_one_fails(
    client: TestClient, settings: Settings
) -> None:
    old = issue_code(settings.home)
    new = issue_code(settings.home)
    assert client.post(URL, json={"code": old}).status_code == 401
    assert client.post(URL, json={"code": new}).status_code == 200

    stale = issue_code(settings.home, now=datetime.now(UTC) - CODE_TTL - timedelta(seconds=1))
    assert client.post(URL, json={"code": stale}).status_code == 401


@embedded
def test_no_code_was_issued(client: TestClient) -> None:
    response = client.post(URL, json={"code": "anything"})
    assert response.status_code == 401
    assert "crucible up" in response.json()["detail"]


@postgres_only
def test_only_the_embedded_mode_redeems_codes(client: TestClient, settings: Settings) -> None:
    code = issue_code(settings.home)
    assert client.post(URL, json={"code": code}).status_code == 404
