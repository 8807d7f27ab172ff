"""Headers that tell browsers how little to trust what the API and the dashboard send:
no framing (clickjacking), no MIME sniffing (an uploaded artifact rendered as HTML), no
referrer leaving the origin, and a Content-Security-Policy on every response.

The dashboard's pages carry `DASHBOARD_CSP` (set where they are served, api/web.py); the
interactive docs keep theirs open, since FastAPI's Swagger UI and ReDoc load from a CDN
with an inline script; everything else is data, which a browser must never run, so it gets
`default-src 'none'`.
"""

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DASHBOARD_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        # Inline styles: CodeMirror writes its themes into <style> elements where a browser
        # lacks constructable stylesheets. Scripts, the dangerous half, stay 'self' only.
        "style-src 'self' 'unsafe-inline'",
        # data: for index.html's empty favicon and images inlined by the bundled CSS.
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
"""What the built Vite app needs: its own module scripts and stylesheets from /assets, and
fetch (with server-sent events over fetch) to its own origin."""

DATA_CSP = "default-src 'none'; frame-ancestors 'none'"
DOCS_CSP = "frame-ancestors 'none'"
DOCS_PATHS = ("/docs", "/redoc")

ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        docs = any(path == p or path.startswith(p + "/") for p in DOCS_PATHS)
        policy = DOCS_CSP if docs else DATA_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in ALWAYS:
                    if name.decode() not in headers:
                        headers.append(name.decode(), value.decode())
                if "content-security-policy" not in headers:
                    headers.append("content-security-policy", policy)
            await send(message)

        await self.app(scope, receive, send_with_headers)
