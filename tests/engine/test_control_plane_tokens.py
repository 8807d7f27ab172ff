"""The engine's API taking Crucible tokens (`crucible serve --crucible-tokens`, as a
ServedModel's pods run it), checked with a real control plane: a token that may read the
project calls the model, another project's or a revoked one does not, and a control plane
that cannot answer is a 503 for a token it never vouched for. With the default cache, a
token revoked or expired stops working within `APPROVAL_TTL_SECONDS`."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import torch

from crucible.client import CrucibleClient
from crucible.config.engine import EngineConfig
from crucible.config.workload import model_preset
from crucible.domain.enums import Role
from crucible.engine.async_engine import AsyncEngine
from crucible.engine.engine import Engine
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.schemas.tenancy import TokenCreate
from crucible.serving.openai.app import create_engine_app
from crucible.serving.openai.control_plane_tokens import APPROVAL_TTL_SECONDS, ControlPlaneTokens
from tests.servers import LocalServer, app_in_thread, free_port

TTL = 0.5


def engine_app(api_url: str, project: str, **cache: Any) -> object:
    """The engine's API taking `project`'s tokens, its answers cached as `cache` says (the
    defaults `crucible serve` uses when it is empty)."""
    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    engine = AsyncEngine(Engine(model, ByteTokenizer(), EngineConfig(block_size=4, num_blocks=32)))
    check = ControlPlaneTokens(api_url, project, **cache)
    return create_engine_app(engine, model_name="m", tokenizer=ByteTokenizer(), token_check=check)


@pytest.fixture(scope="module")
def served(live_server: LocalServer) -> Iterator[str]:
    with app_in_thread(engine_app(live_server.url, "serving", ttl=TTL, refusal_ttl=0.1)) as url:
        yield url


@pytest.fixture(scope="module")
def served_as_deployed(live_server: LocalServer) -> Iterator[str]:
    with CrucibleClient(live_server.url, live_server.token) as admin:
        admin.create_project("deployed")
    with app_in_thread(engine_app(live_server.url, "deployed")) as url:
        yield url


def models(url: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{url}/v1/models", headers=headers, timeout=30).status_code


def test_a_token_that_may_read_the_project_calls_the_model_and_others_do_not(
    served: str, live_server: LocalServer, live_api: CrucibleClient
) -> None:
    live_api.create_project("serving")
    live_api.create_project("other")
    viewer = live_api.create_token(TokenCreate(name="reader", project="serving", role=Role.viewer))
    stranger = live_api.create_token(TokenCreate(name="x", project="other", role=Role.admin))
    assert models(served, viewer.token) == 200
    assert models(served, live_server.token) == 200  # a global admin's token reads everything
    assert models(served, stranger.token) == 401
    assert models(served, "cru_not-a-token") == 401
    assert models(served, None) == 401
    # Revoked: refused once the remembered answer has expired.
    revoked = httpx.delete(
        f"{live_server.url}/api/v1/tokens/{viewer.id}",
        headers={"Authorization": f"Bearer {live_server.token}"},
    )
    assert revoked.is_success, revoked.text
    time.sleep(TTL + 0.2)
    assert models(served, viewer.token) == 401


def test_a_control_plane_that_cannot_answer_is_a_503_not_a_refusal() -> None:
    with app_in_thread(engine_app(f"http://127.0.0.1:{free_port()}", "serving")) as url:
        answer = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer cru_x"})
    assert answer.status_code == 503, answer.text
    assert "cannot check the token" in answer.json()["error"]["message"]


def test_a_revoked_token_stops_working_within_the_bound(
    served_as_deployed: str, live_server: LocalServer, live_api: CrucibleClient
) -> None:
    viewer = live_api.create_token(TokenCreate(name="soon-revoked", project="deployed"))
    assert models(served_as_deployed, viewer.token) == 200  # the approval is now cached
    revoked = httpx.delete(
        f"{live_server.url}/api/v1/tokens/{viewer.id}",
        headers={"Authorization": f"Bearer {live_server.token}"},
    )
    assert revoked.is_success, revoked.text
    time.sleep(APPROVAL_TTL_SECONDS + 0.3)
    assert models(served_as_deployed, viewer.token) == 401


def test_an_expired_token_stops_working_within_the_bound(
    served_as_deployed: str, live_api: CrucibleClient
) -> None:
    expires = datetime.now(UTC) + timedelta(seconds=2)
    short = live_api.create_token(TokenCreate(name="short", project="deployed", expires_at=expires))
    assert models(served_as_deployed, short.token) == 200
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + APPROVAL_TTL_SECONDS + 0.3)
    assert models(served_as_deployed, short.token) == 401
