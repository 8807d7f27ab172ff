"""Keyset (cursor) pagination: stable under inserts and O(limit) at any depth, unlike OFFSET."""

import base64
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import orjson
from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute, Session

from crucible.domain.errors import InvalidInput
from crucible.schemas.common import Page

T = TypeVar("T")


def encode_cursor(sort_value: Any, row_id: int) -> str:
    if isinstance(sort_value, datetime):
        sort_value = {"t": sort_value.isoformat()}
    return base64.urlsafe_b64encode(orjson.dumps([sort_value, row_id])).decode()


def decode_cursor(cursor: str) -> tuple[Any, int]:
    try:
        sort_value, row_id = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(sort_value, dict):
            sort_value = datetime.fromisoformat(sort_value["t"])
        if not isinstance(row_id, int):
            raise TypeError(row_id)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidInput(
            "cursor", cursor, "not a cursor this API returned", location="query"
        ) from exc
    return sort_value, row_id


def paginate(
    session: Session,
    query: Select[Any],
    *,
    sort: InstrumentedAttribute[Any],
    id_column: InstrumentedAttribute[int],
    descending: bool,
    cursor: str | None,
    limit: int,
    to_public: Callable[[Any], T],
) -> Page[T]:
    if cursor is not None:
        after_value, after_id = decode_cursor(cursor)
        query = query.where(_after(sort, id_column, after_value, after_id, descending))
    if descending:
        query = query.order_by(sort.desc(), id_column.desc())
    else:
        query = query.order_by(sort.asc(), id_column.asc())
    rows = list(session.scalars(query.limit(limit + 1)))
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, sort.key), getattr(last, id_column.key))
    return Page(items=[to_public(r) for r in rows], next_cursor=next_cursor)


def _after(
    sort: InstrumentedAttribute[Any],
    id_column: InstrumentedAttribute[int],
    value: Any,
    row_id: int,
    descending: bool,
) -> ColumnElement[bool]:
    if descending:
        return or_(sort < value, and_(sort == value, id_column < row_id))
    return or_(sort > value, and_(sort == value, id_column > row_id))
