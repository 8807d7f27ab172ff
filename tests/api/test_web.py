"""The API serves the built dashboard at `/` without shadowing any API route."""

from pathlib import Path

from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import Settings, load_settings


def embedded(tmp_path: Path, web_dir: Path) -> Settings:
    """SQLite of its own: scripts/test exports CRUCIBLE_DATABASE_URL for the Postgres tests."""
    return load_settings(
        home=tmp_path / "home",
        database_url=f"sqlite:///{tmp_path}/web.db",
        web_dir=web_dir,
        broker_url=None,
    )


def test_dashboard_routes_and_api_stay_apart(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<div id=root></div>")
    (dist / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("nope")
    app = create_app(embedded(tmp_path, web_dir=dist))
    with TestClient(app) as client:
        assert client.get("/").text == "<div id=root></div>"
        assert client.get("/experiments/3/runs").text == "<div id=root></div>"
        assert client.get("/assets/app.js").text == "console.log(1)"
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/api/v1/runs").status_code == 401
        assert client.get("/api/v1/no-such-route").status_code == 404
        assert "nope" not in client.get("/..%2Fsecret.txt").text


def test_no_dashboard_when_not_built(tmp_path: Path) -> None:
    app = create_app(embedded(tmp_path, web_dir=tmp_path / "missing"))
    with TestClient(app) as client:
        assert client.get("/").status_code == 404
        assert app.state.dashboard is False
