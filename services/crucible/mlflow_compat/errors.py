"""MLflow's error shape: `{"error_code": ..., "message": ...}` with the status MLflow's
server gives each code, so the client raises its usual MlflowException."""

from crucible.domain.errors import (
    Conflict,
    CrucibleError,
    Forbidden,
    InvalidInput,
    NotFound,
    ServiceUnavailable,
    Unauthenticated,
)

INVALID_PARAMETER_VALUE = "INVALID_PARAMETER_VALUE"
RESOURCE_DOES_NOT_EXIST = "RESOURCE_DOES_NOT_EXIST"
RESOURCE_ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
INVALID_STATE = "INVALID_STATE"
PERMISSION_DENIED = "PERMISSION_DENIED"
UNAUTHENTICATED = "UNAUTHENTICATED"
ENDPOINT_NOT_FOUND = "ENDPOINT_NOT_FOUND"
TEMPORARILY_UNAVAILABLE = "TEMPORARILY_UNAVAILABLE"
INTERNAL_ERROR = "INTERNAL_ERROR"

# As mlflow/protos/databricks.proto's codes map in mlflow.exceptions.ERROR_CODE_TO_HTTP_STATUS.
HTTP_STATUS = {
    INVALID_PARAMETER_VALUE: 400,
    INVALID_STATE: 400,
    RESOURCE_DOES_NOT_EXIST: 404,
    ENDPOINT_NOT_FOUND: 404,
    RESOURCE_ALREADY_EXISTS: 400,
    PERMISSION_DENIED: 403,
    UNAUTHENTICATED: 401,
    TEMPORARILY_UNAVAILABLE: 503,
    INTERNAL_ERROR: 500,
}


class MlflowError(Exception):
    """An error the MLflow client should see as it would from MLflow's own server."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]


def invalid(message: str) -> MlflowError:
    return MlflowError(INVALID_PARAMETER_VALUE, message)


def missing(entity: str, key: object) -> MlflowError:
    return MlflowError(RESOURCE_DOES_NOT_EXIST, f"{entity} with id={key!r} not found")


def from_crucible(exc: CrucibleError) -> MlflowError:
    """The MLflow error for a Crucible domain error raised by the shared use cases."""
    if isinstance(exc, NotFound):
        return MlflowError(RESOURCE_DOES_NOT_EXIST, str(exc))
    if isinstance(exc, InvalidInput):
        return MlflowError(INVALID_PARAMETER_VALUE, str(exc))
    if isinstance(exc, Unauthenticated):
        return MlflowError(UNAUTHENTICATED, str(exc))
    if isinstance(exc, Forbidden):
        return MlflowError(PERMISSION_DENIED, str(exc))
    if isinstance(exc, ServiceUnavailable):
        return MlflowError(TEMPORARILY_UNAVAILABLE, str(exc))
    if isinstance(exc, Conflict):
        return MlflowError(INVALID_STATE, str(exc))
    return MlflowError(INVALID_PARAMETER_VALUE, str(exc))
