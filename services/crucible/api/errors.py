"""Domain and database errors -> HTTP statuses. Nothing a client sends should end in a 500.

An error's text never shows where the server keeps its files: the server's home directory,
wherever a message names it, reads `HOME_NAME` (a run's folder is `<crucible home>/runs/3`,
which a viewer can follow without learning the machine's layout).
"""

import logging
import math
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from crucible.api.auth_throttle import TooManyFailedAttempts
from crucible.db.schema import SchemaBehind
from crucible.domain.errors import (
    Conflict,
    CrucibleError,
    Forbidden,
    InvalidInput,
    NotFound,
    ServiceUnavailable,
    Unauthenticated,
)

log = logging.getLogger(__name__)

_STATUS: list[tuple[type[CrucibleError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (ServiceUnavailable, 503),
    (SchemaBehind, 503),
]
RETRY_AFTER_SECONDS = "2"
# What a database outage raises: the server refusing or dropping connections, a broken
# driver connection, and the pool timing out while every connection waits on a dead server.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)


HOME_NAME = "<crucible home>"


def _error(status: int, detail: object, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def without_server_paths(text: str, home: Path | None) -> str:
    """`text` with the server's `home` directory, in each of its spellings, as `HOME_NAME`."""
    if home is None:
        return text
    spellings = {str(home), str(home.absolute()), str(home.resolve())}
    for spelling in sorted(spellings, key=len, reverse=True):  # longest first: no half-match
        if spelling not in ("", "/", "."):
            text = text.replace(spelling, HOME_NAME)
    return text


def _home(request: Request) -> Path | None:
    settings = getattr(request.app.state, "settings", None)
    home = getattr(settings, "home", None)
    return home if isinstance(home, Path) else None


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    message = without_server_paths(str(exc), _home(request))
    if isinstance(exc, InvalidInput):
        return _error(
            422,
            [
                {
                    "loc": [exc.location, *exc.field.split(".")],
                    "msg": message,
                    "input": exc.value,
                    "type": "value_error",
                }
            ],
        )
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            if status == 503:
                headers = {"Retry-After": RETRY_AFTER_SECONDS}
            return _error(status, message, headers)
    return _error(400, message)


def _json_safe(value: Any) -> Any:
    """Echoed inputs may hold NaN or infinity, which JSON cannot carry; send them as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _error(422, _json_safe(jsonable_encoder(exc.errors())))


async def _integrity_error(_request: Request, exc: Exception) -> JSONResponse:
    log.info("integrity error mapped to 409: %s", exc)
    return _error(409, "the request conflicts with existing data (a duplicate or a missing parent)")


async def _data_error(_request: Request, exc: Exception) -> JSONResponse:
    # Values the schema let through but the column cannot hold (a too-long string, say).
    log.info("data error mapped to 422: %s", exc)
    return _error(422, "a value does not fit its database column; shorten or reduce it")


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", type(exc).__name__)
    return _error(
        503, "the database is unavailable; retry shortly", {"Retry-After": RETRY_AFTER_SECONDS}
    )


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    # Any other driver error: a dropped connection is an outage; anything else is a bug.
    assert isinstance(exc, DBAPIError)
    if exc.connection_invalidated:
        return await _database_down(request, exc)
    log.error("database error", exc_info=exc)
    return _error(500, "internal database error")


async def _too_many_failed_attempts(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TooManyFailedAttempts)
    return _error(429, str(exc), {"Retry-After": str(exc.retry_after_seconds)})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(CrucibleError, _domain_error)
    app.add_exception_handler(TooManyFailedAttempts, _too_many_failed_attempts)
    app.add_exception_handler(IntegrityError, _integrity_error)
    app.add_exception_handler(DataError, _data_error)
    for unavailable in DATABASE_UNAVAILABLE:
        app.add_exception_handler(unavailable, _database_down)
    app.add_exception_handler(DBAPIError, _database_error)
