"""Stable digests of JSON-like values, so the same spec always hashes the same."""

import hashlib
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def spec_digest(spec: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(spec)).hexdigest()
