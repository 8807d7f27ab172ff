"""Path and query parameter types shared by the routes."""

from typing import Annotated

from fastapi import Path, Query

from crucible.domain.json_values import MAX_INT32, MAX_INT64

PathId = Annotated[int, Path(ge=1, le=MAX_INT64, description="Database id.")]
PathNumber = Annotated[int, Path(ge=1, le=MAX_INT32, description="Attempt number.")]
QueryId = Annotated[int | None, Query(ge=1, le=MAX_INT64)]
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
