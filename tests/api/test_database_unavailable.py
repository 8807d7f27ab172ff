"""Database trouble answers 503 with Retry-After, never 500 (the outage itself is in
tests/api/test_postgres_restart.py; this is the pool running dry, which an outage causes
when every connection hangs on a dead server)."""

from contextlib import ExitStack
from pathlib import Path

from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import load_settings
from tests.conftest import ADMIN_TOKEN, bearer, postgres_only


@postgres_only
def test_an_exhausted_connection_pool_answers_503_with_retry_after(
    database_url: str, tmp_path: Path
) -> None:
    settings = load_settings(
        home=tmp_path / "home",
        database_url=database_url,
        admin_token=ADMIN_TOKEN,
        broker_url=None,
        db_pool_size=1,
        db_pool_timeout_seconds=0.5,
    )
    app = create_app(settings)
    engine = app.state.engine
    with TestClient(app, headers=bearer(ADMIN_TOKEN)) as client, ExitStack() as held:
        assert client.get("/api/v1/projects").status_code == 200
        for _ in range(2):  # pool_size 1 plus as many overflow connections
            held.enter_context(engine.connect())
        response = client.get("/api/v1/projects")
    engine.dispose()
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"].isdigit()
    assert "retry" in response.json()["detail"]
