"""Start the API under uvicorn, after the embedded-mode bootstrap."""

import uvicorn
from fastapi import FastAPI
from rich.console import Console

from crucible.api.app import create_app
from crucible.core.bootstrap import bootstrap_local
from crucible.domain.errors import CrucibleError
from crucible.settings import Settings, load_settings

console = Console(stderr=True)


def serve_api(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    if workers > 1:
        if settings.is_sqlite:
            raise CrucibleError(
                f"--workers {workers} needs Postgres (CRUCIBLE_DATABASE_URL); "
                "the embedded SQLite database takes one API process"
            )
        # Each worker process builds its own app (and engine) from the environment.
        console.print(f"Crucible API on http://{host}:{port} with {workers} workers")
        uvicorn.run(
            "crucible.serve:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
        )
        return
    app = create_app(settings)
    if settings.is_sqlite:
        announce_local(settings, app)
    console.print(f"Crucible API on http://{host}:{port}  (docs: http://{host}:{port}/docs)")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def announce_local(settings: Settings, app: FastAPI) -> None:
    result = bootstrap_local(settings, app.state.session_factory)
    if result.new_token is not None:
        console.print("[bold]Admin token (shown once):[/bold]")
        console.print(result.new_token, highlight=False, soft_wrap=True)
        console.print(f"saved for your CLI in {settings.local_token_file} (mode 600)")


def app_from_env() -> FastAPI:
    return create_app(load_settings())
