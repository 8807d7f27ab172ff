"""Free-form JSON (a run's config, a checkpoint's meta, a dataset's schema) limited to what
every party can hold: Postgres' JSONB, SQLite's JSON and the workloads all read integers of
at most 64 bits, and JSON has no NaN or Infinity (Python's parser takes them, and they
would be stored as null)."""

import math
from typing import Annotated, Any

from pydantic import AfterValidator

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
MAX_INT32 = 2**31 - 1
MAX_JSON_DEPTH = 64
"""Levels of maps and lists: far beyond any config, and well inside what the serializer
writes back (a deeper one passed validation, then failed every response with a 500)."""


def check_json(value: Any, where: str = "", depth: int = 1) -> Any:
    """`value` unchanged, or ValueError naming the first bad number's (or too deep a
    value's) path in it."""
    if isinstance(value, dict | list) and depth > MAX_JSON_DEPTH:
        raise ValueError(
            f"{where or 'the value'}: nested deeper than the limit of {MAX_JSON_DEPTH} levels"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            check_json(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{where}[{index}]", depth + 1)
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if not MIN_INT64 <= value <= MAX_INT64:
            raise ValueError(f"{where or 'the value'}: {value} does not fit in 64 bits")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where or 'the value'}: {value} is not a finite number")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(check_json)]
