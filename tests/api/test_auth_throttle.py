"""Wrong credentials are rate limited per client address: past the limit of distinct wrong
tokens (or sign-in codes), 429 with Retry-After."""

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer

LIMIT = 3


@pytest.fixture
def strict_app(settings: Settings) -> Iterator[FastAPI]:
    application = create_app(settings.model_copy(update={"auth_failure_limit": LIMIT}))
    yield application
    application.state.engine.dispose()


def test_wrong_tokens_past_the_limit_get_429_even_with_a_right_token(strict_app: FastAPI) -> None:
    with TestClient(strict_app) as client:
        for attempt in range(LIMIT):
            refused = client.get("/api/v1/projects", headers=bearer(f"cru_guess{attempt}"))
            assert refused.status_code == 401
        limited = client.get("/api/v1/projects", headers=bearer("cru_guess-again"))
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert "too many failed authentication attempts" in limited.json()["detail"]
        # The address waits out the window whatever it sends: a guess that happens to be
        # right is not told so.
        assert client.get("/api/v1/projects", headers=bearer(ADMIN_TOKEN)).status_code == 429


def test_no_token_a_right_token_or_one_stale_token_repeated_never_locks_out(
    strict_app: FastAPI,
) -> None:
    """A workload left with a revoked token retries it; the machine it shares an address with
    (in the embedded mode, everything) must keep working."""
    with TestClient(strict_app) as client:
        for _ in range(LIMIT * 3):
            assert client.get("/api/v1/projects").status_code == 401
            stale = client.get("/api/v1/projects", headers=bearer("cru_revoked-long-ago"))
            assert stale.status_code == 401
            assert client.get("/api/v1/projects", headers=bearer(ADMIN_TOKEN)).status_code == 200


# Only the embedded (SQLite) mode redeems sign-in codes.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_wrong_sign_in_codes_count_too(strict_app: FastAPI) -> None:
    with TestClient(strict_app) as client:
        statuses = [
            client.post("/api/v1/auth/sign-in-code", json={"code": f"guess-{i}"}).status_code
            for i in range(LIMIT + 1)
        ]
    assert statuses == [401] * LIMIT + [429]
