from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from crucible.domain.json_values import MAX_INT32, MAX_INT64

T = TypeVar("T")

# Database ids and steps are 64-bit; larger numbers are refused as input, not overflowed.
Id = Annotated[int, Field(ge=1, le=MAX_INT64)]
Step = Annotated[int, Field(ge=0, le=MAX_INT64)]
Int32 = Annotated[int, Field(ge=-MAX_INT32 - 1, le=MAX_INT32)]

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]
# Characters that make text read other than it displays, or that a database cannot hold:
# C0 controls and DEL (NUL among them), and the bidirectional overrides and isolates
# (U+202A-U+202E, U+2066-U+2069). Free text keeps tab, newline and carriage return.
_BIDI = "\u202a-\u202e\u2066-\u2069"  # the characters themselves: both regex dialects read them
HIDDEN_IN_NAMES = "\\x00-\\x1f\\x7f" + _BIDI
HIDDEN_IN_TEXT = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f" + _BIDI
PLAIN_TEXT = f"^[^{HIDDEN_IN_TEXT}]*$"
PLAIN_NAME = f"^[^{HIDDEN_IN_NAMES}]*$"

Description = Annotated[str, Field(max_length=2000, pattern=PLAIN_TEXT)]
TagKey = Annotated[str, Field(min_length=1, max_length=128, pattern=PLAIN_NAME)]
TagValue = Annotated[str, Field(max_length=1024, pattern=PLAIN_NAME)]
Tags = Annotated[
    dict[TagKey, TagValue],
    Field(max_length=100, description="Up to 100 tags; keys 1-128 characters, values up to 1,024."),
]


def _in_utc(moment: datetime) -> datetime:
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+01:00
        raise ValueError("is out of range once converted to UTC") from exc


# A point in time with its zone: a naive one would be read in whatever zone the server or
# the database happens to use (SQLite and Postgres disagree), so it is refused.
Moment = Annotated[AwareDatetime, AfterValidator(_in_utc)]


class ApiModel(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 422, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class UpdateModel(ApiModel):
    """A partial update: a field left out keeps its value. None of these fields can be
    cleared, so an explicit null is refused naming the field (it used to reach the database
    and come back as a misleading 409)."""

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("leave the field out to keep its value; it cannot be null")
        return value


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
    created_after: Moment | None = None
    created_before: Moment | None = None
