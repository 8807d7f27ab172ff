"""What every MLflow route shares: errors in MLflow's shape, the caller from a bearer or
basic-auth token, the request's fields and the artifact store."""

import base64
import binascii
import logging
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError

from crucible.api.auth_throttle import TooManyFailedAttempts
from crucible.api.deps import CredentialCheckDep, SettingsDep, Uow
from crucible.api.errors import DATABASE_UNAVAILABLE, RETRY_AFTER_SECONDS
from crucible.core.tokens import authenticate
from crucible.domain.errors import CrucibleError, Unauthenticated
from crucible.mlflow_compat.artifacts import Location
from crucible.mlflow_compat.caller import Caller
from crucible.mlflow_compat.errors import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    TEMPORARILY_UNAVAILABLE,
    MlflowError,
    from_crucible,
)

log = logging.getLogger(__name__)
API = "/mlflow/api/2.0/mlflow"
ARTIFACTS = "/mlflow/api/2.0/mlflow-artifacts/artifacts"


def mlflow_error(error: MlflowError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error_code": error.code, "message": error.message},
        status_code=error.status,
        headers=headers,
    )


def _as_mlflow(exc: Exception) -> JSONResponse | None:
    if isinstance(exc, MlflowError):
        return mlflow_error(exc)
    if isinstance(exc, Unauthenticated):
        return mlflow_error(from_crucible(exc), {"WWW-Authenticate": 'Basic realm="crucible"'})
    if isinstance(exc, CrucibleError):
        return mlflow_error(from_crucible(exc))
    if isinstance(exc, ValidationError):
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return mlflow_error(MlflowError(INVALID_PARAMETER_VALUE, problems))
    if isinstance(exc, TooManyFailedAttempts):
        return JSONResponse(
            {"error_code": "REQUEST_LIMIT_EXCEEDED", "message": str(exc)},
            status_code=429,
            headers={"Retry-After": str(exc.retry_after_seconds)},
        )
    if isinstance(exc, IntegrityError):
        log.info("integrity error on an MLflow route: %s", exc)
        return mlflow_error(
            MlflowError(RESOURCE_ALREADY_EXISTS, "the request clashes with data written meanwhile")
        )
    if isinstance(exc, DATABASE_UNAVAILABLE) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return mlflow_error(
            MlflowError(TEMPORARILY_UNAVAILABLE, "the database is unavailable; retry shortly"),
            {"Retry-After": RETRY_AFTER_SECONDS},
        )
    return None


class MlflowRoute(APIRoute):
    """A route whose errors, from its dependencies too, come back in MLflow's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                answer = _as_mlflow(exc)
                if answer is None:
                    raise
                return answer

        return handle


def _credentials(request: Request) -> tuple[str, str | None]:
    """The token and, with basic auth, the user name (a project's name)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip(), None
    if scheme.lower() == "basic" and value:
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("malformed basic-auth credentials") from None
        if password:
            return password, user or None
    raise Unauthenticated(
        "no Crucible token: set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME (a project) "
        "and MLFLOW_TRACKING_PASSWORD (the token)"
    )


def get_caller(
    request: Request, uow: Uow, settings: SettingsDep, credential_check: CredentialCheckDep
) -> Caller:
    token, project = _credentials(request)
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    with credential_check(token), uow() as session:
        principal = authenticate(session=session, raw=token, admin_token=admin)
    return Caller(principal=principal, project_name=project)


async def get_fields(request: Request) -> dict[str, Any]:
    """A GET's query (repeated names as lists), or a body's JSON object."""
    if request.method == "GET":
        fields: dict[str, Any] = {}
        for name, value in request.query_params.multi_items():
            if name in fields:
                previous = fields[name]
                fields[name] = (
                    [*previous, value] if isinstance(previous, list) else [previous, value]
                )
            else:
                fields[name] = value
        return fields
    body = await request.body()
    if not body:
        return {}
    try:
        import json

        parsed = json.loads(body)
    except ValueError:
        raise MlflowError(INVALID_PARAMETER_VALUE, "the request body is not JSON") from None
    except RecursionError:
        raise MlflowError(
            INVALID_PARAMETER_VALUE, "the request body's JSON is nested too deep"
        ) from None
    if not isinstance(parsed, dict):
        raise MlflowError(INVALID_PARAMETER_VALUE, "the request body must be a JSON object")
    return parsed


def get_location(settings: SettingsDep) -> Location:
    return Location(settings.resolved_mlflow_artifact_root)


CallerDep = Annotated[Caller, Depends(get_caller)]
FieldsDep = Annotated[dict[str, Any], Depends(get_fields)]
LocationDep = Annotated[Location, Depends(get_location)]
