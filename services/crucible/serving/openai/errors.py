"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, whatever
raised them: the server's own refusals (`ApiError`), the engine's (`InvalidParameter`, a
400 naming the field; `EngineStopped`, a 503), and FastAPI's (validation, 404, 405).
"""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from crucible.config.sampling import InvalidParameter
from crucible.engine.async_engine import EngineStopped
from crucible.serving.openai.protocol import ErrorDetail, ErrorResponse


class ApiError(Exception):
    """A refusal with its HTTP status, in OpenAI's terms (an unknown model, a missing key)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> ErrorResponse:
    return ErrorResponse(error=ErrorDetail(message=message, type=type, param=param, code=code))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error the app raises in OpenAI's shape."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidParameter, _invalid_parameter)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(EngineStopped, _engine_stopped)


def _error(status: int, body: ErrorResponse, headers: dict[str, str] | None = None) -> Response:
    return Response(
        body.model_dump_json(), status_code=status, media_type="application/json", headers=headers
    )


def error_response(exc: ApiError) -> Response:
    """The response that answers `exc` (also sent by the request gate, outside FastAPI)."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    body = error_body(exc.message, type=exc.type, param=exc.param, code=exc.code)
    return _error(exc.status, body, headers)


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _invalid_parameter(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidParameter)
    return _error(400, error_body(str(exc), param=exc.field))


async def _invalid_request(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    messages, param = [], None
    for error in errors[:3]:
        location = list(error.get("loc", ()))
        if location[:1] == ["body"]:
            location = location[1:]
        if param is None and location and isinstance(location[0], str):
            param = location[0]
        where = ".".join(str(part) for part in location) or "body"
        message = f"{where}: {error.get('msg', 'invalid')}"
        if error.get("type") not in ("missing", "json_invalid"):
            message += f", got {_short(error.get('input'))}"
        messages.append(message)
    if len(errors) > len(messages):
        messages.append(f"and {len(errors) - len(messages)} more")
    return _error(400, error_body("; ".join(messages), param=param))


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    body = error_body(str(exc.detail), code=str(exc.status_code))
    return _error(exc.status_code, body, dict(exc.headers) if exc.headers else None)


async def _engine_stopped(_request: Request, exc: Exception) -> Response:
    body = error_body(f"{exc}; try again later", type="server_error")
    return _error(503, body, {"Retry-After": "5"})


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
