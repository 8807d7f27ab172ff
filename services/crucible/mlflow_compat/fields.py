"""Reading an MLflow request's fields: protobuf's JSON (int64 as strings or numbers) from a
body, or the same fields from a GET's query string. A missing or mistyped field is an
INVALID_PARAMETER_VALUE that names it and its value."""

from collections.abc import Mapping
from typing import Any

from crucible.mlflow_compat.errors import invalid

Fields = Mapping[str, Any]
# Protobuf's int64, which every integer field of MLflow's API is.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def text(fields: Fields, name: str, *, required: bool = False, default: str = "") -> str:
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"Missing value for required parameter '{name}'.")
        return default
    if not isinstance(value, str):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a string.")
    return value


def integer(fields: Fields, name: str, *, default: int | None = None) -> int | None:
    value = fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected an integer.")
    try:
        whole = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        raise invalid(
            f"Invalid value {value!r} for parameter '{name}': expected an integer."
        ) from None
    if not INT64_MIN <= whole <= INT64_MAX:
        raise invalid(
            f"Invalid value {_short(value)} for parameter '{name}': expected a 64-bit integer."
        )
    return whole


def number(fields: Fields, name: str) -> float:
    value = fields.get(name)
    if isinstance(value, bool) or value is None:
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a number.")
    try:
        return float(value)  # protobuf's JSON spells NaN and infinities as strings
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past a double's range
        raise invalid(
            f"Invalid value {_short(value)} for parameter '{name}': expected a 64-bit float."
        ) from None


def _short(value: Any) -> str:
    """A value for a message: a number of 400 digits is named by its first ones."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:30]}... ({len(shown)} characters)"


def strings(fields: Fields, name: str) -> list[str]:
    value = fields.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected strings.")
    return value


def objects(fields: Fields, name: str) -> list[dict[str, Any]]:
    value = fields.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise invalid(f"Invalid value {value!r} for parameter '{name}': expected a list.")
    return value


def key_values(fields: Fields, name: str) -> list[tuple[str, str]]:
    """`[{"key": k, "value": v}, ...]`, as MLflow sends tags and params."""
    pairs = []
    for item in objects(fields, name):
        key = text(item, "key", required=True)
        value = item.get("value", "")
        if not isinstance(value, str):
            value = str(value)
        pairs.append((key, value))
    return pairs
