"""Serve the built dashboard (web/dist) at `/`, with index.html for client-side routes, under
the Content-Security-Policy the built app needs (security_headers.py)."""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

import crucible
from crucible.api.security_headers import DASHBOARD_CSP

# In a checkout the dashboard is built next to the Python sources.
CHECKOUT_DIST = Path(crucible.__file__).resolve().parents[2] / "web" / "dist"


def mount_dashboard(app: FastAPI, dist: Path | None) -> bool:
    dist = dist or CHECKOUT_DIST
    index = dist / "index.html"
    if not index.is_file():
        return False
    page_headers = {"Content-Security-Policy": DASHBOARD_CSP}
    if (dist / "assets").is_dir():
        app.mount("/assets", StaticFiles(directory=dist / "assets"), name="assets")

    @app.get("/{path:path}", include_in_schema=False, response_model=None)
    def dashboard(path: str) -> FileResponse | JSONResponse:
        if path.startswith("api/"):
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        candidate = (dist / path).resolve()
        if path and candidate.is_file() and candidate.is_relative_to(dist.resolve()):
            return FileResponse(candidate, headers=page_headers)
        return FileResponse(index, headers=page_headers)

    return True
