"""MLflow's page tokens: an opaque offset into a sorted result."""

import base64
import binascii
from collections.abc import Sequence
from typing import TypeVar

from crucible.mlflow_compat.errors import invalid

T = TypeVar("T")


def page_of(
    rows: Sequence[T], *, max_results: int, page_token: str, most: int
) -> tuple[Sequence[T], str]:
    if not 0 < max_results <= most:
        raise invalid(
            f"Invalid value {max_results} for parameter 'max_results' supplied. It must be "
            f"a positive integer not above {most}"
        )
    offset = _offset(page_token)
    page = rows[offset : offset + max_results]
    following = offset + max_results
    token = (
        base64.urlsafe_b64encode(str(following).encode()).decode() if following < len(rows) else ""
    )
    return page, token


def _offset(page_token: str) -> int:
    if not page_token:
        return 0
    try:
        offset = int(base64.urlsafe_b64decode(page_token.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise invalid(
            f"Invalid page token {page_token!r}; pass the one the last page gave"
        ) from None
    if offset < 0:
        raise invalid(f"Invalid page token {page_token!r}; pass the one the last page gave")
    return offset
