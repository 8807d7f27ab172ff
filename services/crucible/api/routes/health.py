"""Liveness, readiness and Prometheus metrics; no authentication (probes and scrapers)."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from crucible import process_metrics
from crucible.api.errors import RETRY_AFTER_SECONDS
from crucible.db.schema import current_revision, head_revision

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz")
def readyz(request: Request) -> JSONResponse:
    engine = request.app.state.engine
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        revision = current_revision(engine)
    except Exception as exc:
        return JSONResponse(
            {"status": "database unreachable", "error": type(exc).__name__},
            503,
            headers={"Retry-After": RETRY_AFTER_SECONDS},
        )
    if revision != head_revision():
        return JSONResponse({"status": "schema behind", "revision": revision}, 503)
    return JSONResponse({"status": "ok", "revision": revision})


@router.get("/metrics", operation_id="prometheusMetrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    # The registry the API shares with the workers (theirs count in it when `crucible up`
    # runs them in this process).
    body = generate_latest(request.app.state.metrics.registry) + generate_latest(
        process_metrics.REGISTRY
    )
    return Response(body, media_type=CONTENT_TYPE_LATEST)
