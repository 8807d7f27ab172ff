"""Wrong credentials are rate limited per client address: past the limit of distinct wrong
tokens (or sign-in codes), 429 with Retry-After."""

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.api.auth_throttle import RedisFailures
from crucible.core import signin
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer
from tests.servers import free_port, local_server

LIMIT = 3


@pytest.fixture
def strict_app(settings: Settings) -> Iterator[FastAPI]:
    application = create_app(settings.model_copy(update={"auth_failure_limit": LIMIT}))
    yield application
    application.state.engine.dispose()


def test_wrong_tokens_past_the_limit_get_429_and_a_right_token_still_works(
    strict_app: FastAPI,
) -> None:
    with TestClient(strict_app) as client:
        for attempt in range(LIMIT):
            refused = client.get("/api/v1/projects", headers=bearer(f"cru_guess{attempt}"))
            assert refused.status_code == 401
        limited = client.get("/api/v1/projects", headers=bearer("cru_guess-again"))
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert "too many failed authentication attempts" in limited.json()["detail"]
        # The users who share the guesser's address (a NAT, a proxy) keep working: a right
        # token is never refused, and the next wrong one is still limited.
        assert client.get("/api/v1/projects", headers=bearer(ADMIN_TOKEN)).status_code == 200
        again = client.get("/api/v1/projects", headers=bearer("cru_guess-more"))
        assert again.status_code == 429


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


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_right_sign_in_code_works_from_a_limited_address(
    strict_app: FastAPI, settings: Settings
) -> None:
    code = signin.issue_code(settings.home)
    with TestClient(strict_app) as client:
        for i in range(LIMIT + 1):
            client.post("/api/v1/auth/sign-in-code", json={"code": f"guess-{i}"})
        redeemed = client.post("/api/v1/auth/sign-in-code", json={"code": code})
    assert redeemed.status_code == 200, redeemed.text


@pytest.mark.timeout(420)  # past its own waits: two servers' starts
def test_forwarded_for_names_the_client_only_behind_a_trusted_proxy(tmp_path: Path) -> None:
    """`crucible server` as deployed, over TCP: X-Forwarded-For from an untrusted peer (here
    127.0.0.1, which uvicorn alone would believe) changes nothing, so rotating it does not
    dodge the limit and setting it to another client's address does not aim it there."""
    limits = {"CRUCIBLE_AUTH_FAILURE_LIMIT": str(LIMIT), "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN}
    (tmp_path / "direct").mkdir()
    (tmp_path / "proxied").mkdir()
    with local_server(tmp_path / "direct", env=limits) as server:
        statuses = [
            httpx.get(
                f"{server.url}/api/v1/projects",
                headers={**bearer(f"cru_guess{i}"), "X-Forwarded-For": f"203.0.113.{i}"},
            ).status_code
            for i in range(LIMIT + 2)
        ]
        assert statuses == [401] * LIMIT + [429, 429]
    trusted = {**limits, "CRUCIBLE_TRUSTED_PROXIES": "127.0.0.1"}
    with local_server(tmp_path / "proxied", env=trusted) as server:
        # Behind a proxy it trusts, each forwarded address counts on its own.
        for i in range(LIMIT + 2):
            response = httpx.get(
                f"{server.url}/api/v1/projects",
                headers={**bearer(f"cru_guess{i}"), "X-Forwarded-For": f"203.0.113.{i}"},
            )
            assert response.status_code == 401


def shared_broker() -> str:
    """A Redis database of the test stack's server for this module alone."""
    base = os.environ.get("CRUCIBLE_BROKER_URL", "redis://127.0.0.1:16379/0")
    url = base.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).delete(RedisFailures.PREFIX + "testclient")
    return url


@pytest.mark.redis
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_api_replicas_share_the_count_through_redis(settings: Settings) -> None:
    shared = settings.model_copy(
        update={"auth_failure_limit": LIMIT, "broker_url": shared_broker()}
    )
    replicas = [create_app(shared), create_app(shared)]
    try:
        with TestClient(replicas[0]) as first, TestClient(replicas[1]) as second:
            statuses = [
                (first if i % 2 == 0 else second)
                .get("/api/v1/projects", headers=bearer(f"cru_guess{i}"))
                .status_code
                for i in range(LIMIT + 1)
            ]
            assert statuses == [401] * LIMIT + [429]  # the last one counted the other's too
            assert second.get("/api/v1/projects", headers=bearer(ADMIN_TOKEN)).status_code == 200
    finally:
        for replica in replicas:
            replica.state.engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_redis_that_does_not_answer_limits_nothing_and_refuses_no_right_token(
    settings: Settings,
) -> None:
    gone = settings.model_copy(
        update={"auth_failure_limit": LIMIT, "broker_url": f"redis://127.0.0.1:{free_port()}/0"}
    )
    app = create_app(gone)
    try:
        with TestClient(app) as client:
            for i in range(LIMIT + 2):
                wrong = client.get("/api/v1/projects", headers=bearer(f"cru_guess{i}"))
                assert wrong.status_code == 401
            assert client.get("/api/v1/projects", headers=bearer(ADMIN_TOKEN)).status_code == 200
    finally:
        app.state.engine.dispose()
