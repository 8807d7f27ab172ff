"""The FastAPI application factory."""

import logging

from fastapi import FastAPI

from crucible import __version__
from crucible.api.auth_throttle import throttle_for
from crucible.api.errors import install_error_handlers
from crucible.api.limits import BodySizeLimit
from crucible.api.observability import ApiMetrics, RequestMetrics
from crucible.api.routes import (
    artifacts,
    cluster,
    dashboard,
    deployments,
    health,
    lineage,
    manifests,
    metrics,
    mlflow,
    profiles,
    projects,
    runs,
    signin,
    sweeps,
)
from crucible.api.security_headers import SecurityHeaders
from crucible.api.web import mount_dashboard
from crucible.core import storage_check
from crucible.db import schema
from crucible.db.engine import build_engine, build_session_factory
from crucible.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> FastAPI:
    """Build the API. Embedded SQLite upgrades its own schema; Postgres must already be at
    head (`crucible db upgrade`), because migrating a shared database is an operator's call."""
    engine = build_engine(settings)
    if settings.is_sqlite:
        schema.upgrade(engine)
    else:
        schema.ensure_at_head(engine)
    session_factory = build_session_factory(engine)
    session_factory.configure(info=storage_check.session_info(settings))

    app = FastAPI(
        title="Crucible",
        version=__version__,
        description="Experiments, runs, datasets, checkpoints, evals and their lineage.",
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.metrics = ApiMetrics(engine, session_factory)
    app.state.auth_throttle = throttle_for(settings)

    install_error_handlers(app)
    for module in (
        health,
        projects,
        runs,
        metrics,
        lineage,
        artifacts,
        signin,
        dashboard,
        profiles,
        cluster,
        deployments,
        sweeps,
        manifests,
        mlflow,
    ):
        app.include_router(module.router)
    # Last, so its catch-all route never shadows the API.
    app.state.dashboard = mount_dashboard(app, settings.web_dir)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    # Outermost: every answer carries the headers, the body limit's 413 included.
    app.add_middleware(SecurityHeaders)
    return app
