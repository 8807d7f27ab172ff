from datetime import datetime
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

# Database ids and steps are 64-bit; larger numbers are refused as input, not overflowed.
MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1
Id = Annotated[int, Field(ge=1, le=MAX_INT64)]
Step = Annotated[int, Field(ge=0, le=MAX_INT64)]
Int32 = Annotated[int, Field(ge=-MAX_INT32 - 1, le=MAX_INT32)]

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]
Description = Annotated[str, Field(max_length=2000)]
Tags = Annotated[dict[str, str], Field(max_length=100)]


class ApiModel(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 422, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class PublicModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Page(PublicModel, Generic[T]):
    """One page of a list. Pass `next_cursor` back as `cursor` for the next page."""

    items: list[T]
    next_cursor: str | None = None


class Deleted(PublicModel):
    id: int
    deleted: bool = True


class TimeRange(BaseModel):
    created_after: datetime | None = None
    created_before: datetime | None = None
