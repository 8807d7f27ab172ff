"""Who may call /v1: a bearer key from the server's list, compared in constant time."""

import hmac
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

from fastapi import Header

from crucible.engine.openai_errors import ApiError


def require_api_key(api_keys: Sequence[str]) -> Callable[..., Coroutine[Any, Any, None]]:
    """A FastAPI dependency that refuses (401) a request without one of `api_keys`; the
    list itself is refused (ValueError) when it is empty or holds a blank key."""
    if not api_keys:
        raise ValueError("api_keys is empty; the engine's API needs at least one key")
    for position, key in enumerate(api_keys):
        if not key.strip():
            raise ValueError(f"api_keys[{position}] is blank; every API key must be non-empty")
    keys = [key.strip().encode() for key in api_keys]

    async def require_key(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(
                401,
                "no API key; send it as the header 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
        candidate = given.strip().encode()
        # Every key compared, each in constant time: the answer's timing tells nothing.
        matched = [hmac.compare_digest(candidate, key) for key in keys]
        if not any(matched):
            raise ApiError(
                401, "the API key is not one this server accepts", code="invalid_api_key"
            )

    return require_key
