"""Every answer of the API and the dashboard tells the browser not to frame it, sniff it or
send its address elsewhere, and carries a Content-Security-Policy: the dashboard's lets
the built app load from its own origin only, the API's data runs nowhere."""

import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import load_settings

REPO = Path(__file__).resolve().parents[2]


def client_with_dashboard(tmp_path: Path) -> TestClient:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    # The built index.html as Vite writes it: the page's own module script and stylesheet.
    (dist / "index.html").write_text(
        (REPO / "web" / "index.html")
        .read_text()
        .replace("/src/main.tsx", "/assets/index.js")
        .replace("</head>", '<link rel="stylesheet" href="/assets/index.css"></head>')
    )
    (dist / "assets" / "index.js").write_text("console.log(1)")
    (dist / "assets" / "index.css").write_text("body{}")
    settings = load_settings(
        home=tmp_path / "home",
        database_url=f"sqlite:///{tmp_path}/headers.db",
        web_dir=dist,
        broker_url=None,
        max_body_bytes=1024,
    )
    return TestClient(create_app(settings))


def policy(response: Any) -> dict[str, list[str]]:
    """The CSP header as directive -> sources."""
    directives = [d.split() for d in response.headers["content-security-policy"].split(";")]
    return {d[0]: d[1:] for d in directives if d}


def assert_hardened(response: Any) -> None:
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert policy(response)["frame-ancestors"] == ["'none'"]


def test_the_dashboard_page_loads_only_from_its_own_origin(tmp_path: Path) -> None:
    with client_with_dashboard(tmp_path) as client:
        for path in ("/", "/experiments/3/runs"):
            page = client.get(path)
            assert page.status_code == 200 and 'id="root"' in page.text
            assert_hardened(page)
            csp = policy(page)
            assert csp["default-src"] == ["'self'"]
            assert csp["script-src"] == ["'self'"]
            assert csp["connect-src"] == ["'self'"]
            assert csp["object-src"] == ["'none'"]
        assert_hardened(client.get("/assets/index.js"))


def test_the_dashboard_policy_allows_what_its_page_uses(tmp_path: Path) -> None:
    """No inline script in index.html (script-src is 'self' alone), and its data: favicon
    is an image the policy lets load."""
    index = (REPO / "web" / "index.html").read_text()
    for script in re.findall(r"<script\b[^>]*>(.*?)</script>", index, flags=re.S):
        assert not script.strip(), f"an inline script the policy would block: {script!r}"
    assert "style=" not in index and "<style" not in index
    with client_with_dashboard(tmp_path) as client:
        csp = policy(client.get("/"))
    icons = re.findall(r'<link rel="icon" href="([a-z]+):', index)
    for scheme in icons:
        assert f"{scheme}:" in csp["img-src"]


def test_api_answers_carry_the_headers_and_a_policy_that_runs_nothing(tmp_path: Path) -> None:
    with client_with_dashboard(tmp_path) as client:
        answers = [
            client.get("/healthz"),
            client.get("/api/v1/runs"),  # 401
            client.get("/api/v1/no-such-route"),  # 404
            client.post("/api/v1/projects", content=b"x" * 2048),  # 413 from the body limit
        ]
        assert [a.status_code for a in answers] == [200, 401, 404, 413]
        for answer in answers:
            assert_hardened(answer)
            assert policy(answer)["default-src"] == ["'none'"]
        docs = client.get("/docs")
        assert docs.status_code == 200
        assert_hardened(docs)
        assert "default-src" not in policy(docs)  # Swagger UI loads from its CDN
