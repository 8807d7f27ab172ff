"""Who may call /v1: a bearer key from the server's list, compared in constant time, or a
Crucible API token that a `TokenCheck` (control_plane_tokens.py) accepts."""

import hmac
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from crucible.serving.openai.errors import ApiError


class TokenCheck(Protocol):
    async def allows(self, token: str) -> bool:
        """Whether `token` may call this server (raises ApiError when it cannot say now)."""
        ...


def api_key_check(
    api_keys: Sequence[str], token_check: TokenCheck | None = None
) -> Callable[[str | None], Coroutine[Any, Any, None]]:
    """A check of an Authorization header (see `request_gate.KeyCheck`) that refuses (401)
    one without one of `api_keys` or a token `token_check` allows; refused (ValueError) when
    it would accept nothing, or when the list holds a blank key."""
    if not api_keys and token_check is None:
        raise ValueError("api_keys is empty; the engine's API needs at least one key")
    for position, key in enumerate(api_keys):
        if not key.strip():
            raise ValueError(f"api_keys[{position}] is blank; every API key must be non-empty")
    keys = [key.strip().encode() for key in api_keys]

    async def check_key(authorization: str | None) -> None:
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
        if any(matched):
            return
        if token_check is not None and await token_check.allows(given.strip()):
            return
        raise ApiError(401, "the API key is not one this server accepts", code="invalid_api_key")

    return check_key
