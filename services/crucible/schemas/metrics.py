"""Metric points in, metric series out.

History is columnar (one list per field, per series): 100,000 points cost three JSON arrays
instead of 100,000 objects, which is both smaller on the wire and faster on both ends.
"""

from typing import Annotated, NotRequired

from pydantic import ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict  # pydantic needs this one below Python 3.12

from crucible.schemas.common import HIDDEN_IN_NAMES, ApiModel, PublicModel, Step

MAX_BATCH_POINTS = 10_000
# A metric's wall-clock time: a clock that far off is a bug, and charts by time need a scale.
EARLIEST_TIME = 946_684_800.0  # 2000-01-01T00:00:00Z
LATEST_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z
# Commas are refused because the history filter `keys=a,b` splits on them.
KEY_PATTERN = f"^[^,{HIDDEN_IN_NAMES}]+$"


MetricKey = Annotated[str, Field(min_length=1, max_length=250, pattern=KEY_PATTERN)]
FiniteValue = Annotated[float, Field(allow_inf_nan=False)]
StepOfPoint = Annotated[Step, Field(description="Training step; one value per key and step.")]
# Seconds since the epoch, optional; the description says which values it times.
MetricTime = Annotated[float | None, Field(allow_inf_nan=False, ge=EARLIEST_TIME, le=LATEST_TIME)]


# A TypedDict rather than a model: pydantic validates a 10,000-point batch about twice as
# fast when it need not build an object per point.
@with_config(ConfigDict(extra="forbid"))
class MetricPointIn(TypedDict):
    """One value of one metric at one step."""

    key: Annotated[
        MetricKey,
        Field(description="The metric's name, e.g. `train/loss`; no commas or control characters."),
    ]
    step: StepOfPoint
    value: Annotated[
        FiniteValue, Field(description="A finite number; NaN and infinities are refused.")
    ]
    time: NotRequired[
        Annotated[
            MetricTime,
            Field(
                description="Seconds since the epoch, between 2000 and 2100; default: when the "
                "server receives it."
            ),
        ]
    ]


@with_config(ConfigDict(extra="forbid"))
class MetricRowIn(TypedDict):
    """The values of several metrics at one step: what one `run.log(values, step=...)` call
    logged. The SDK sends these: a row of 20 metrics is one object instead of 20."""

    step: StepOfPoint
    values: Annotated[
        dict[MetricKey, FiniteValue],
        Field(description="Metric name -> a finite number, as in `points`."),
    ]
    time: NotRequired[
        Annotated[
            MetricTime,
            Field(
                description="Seconds since the epoch for every value of the row, as in `points`."
            ),
        ]
    ]


class MetricColumnsIn(ApiModel):
    """Steps that logged the same keys, as columns: the keys once, the steps, their times,
    and the values step by step (the first step's value of each key in `keys` order, then
    the second step's, ...). What the SDK sends: a batch's keys are written once per group
    instead of once per point, and its numbers are plain lists."""

    keys: list[MetricKey] = Field(min_length=1, max_length=MAX_BATCH_POINTS)
    steps: list[StepOfPoint] = Field(min_length=1, max_length=MAX_BATCH_POINTS)
    times: list[MetricTime] | None = Field(
        default=None,
        description="Seconds since the epoch, one per step, as in `points`; default: when the "
        "server receives them.",
    )
    values: list[FiniteValue] = Field(
        max_length=MAX_BATCH_POINTS,
        description="len(steps) x len(keys) finite numbers, step by step.",
    )

    @model_validator(mode="after")
    def _shape(self) -> "MetricColumnsIn":
        if len(set(self.keys)) != len(self.keys):
            repeated = sorted({k for k in self.keys if self.keys.count(k) > 1})
            raise ValueError(f"keys repeats {repeated}; name each key once")
        if len(self.values) != len(self.steps) * len(self.keys):
            raise ValueError(
                f"values holds {len(self.values)} numbers; {len(self.steps)} steps x "
                f"{len(self.keys)} keys need {len(self.steps) * len(self.keys)}"
            )
        if self.times is not None and len(self.times) != len(self.steps):
            raise ValueError(
                f"times holds {len(self.times)} times for {len(self.steps)} steps; give one "
                "per step or none"
            )
        return self


class MetricBatch(ApiModel):
    """Up to 10,000 points of one run, as single points, as rows of one step each, as
    columns, or any mix. A (key, step) already stored is a duplicate and keeps its first
    value; within one batch, too, the first occurrence of a (key, step) wins (`points`, then
    `rows`, then `columns`)."""

    points: list[MetricPointIn] = Field(default_factory=list, max_length=MAX_BATCH_POINTS)
    rows: list[MetricRowIn] = Field(default_factory=list, max_length=MAX_BATCH_POINTS)
    columns: list[MetricColumnsIn] = Field(default_factory=list, max_length=MAX_BATCH_POINTS)

    @model_validator(mode="after")
    def _at_most_max_points(self) -> "MetricBatch":
        if self.point_count > MAX_BATCH_POINTS:
            raise ValueError(
                f"the batch holds {self.point_count} points; at most {MAX_BATCH_POINTS} "
                "are taken in one request"
            )
        return self

    @property
    def point_count(self) -> int:
        return (
            len(self.points)
            + sum(len(row["values"]) for row in self.rows)
            + sum(len(group.values) for group in self.columns)
        )


class IngestResult(PublicModel):
    accepted: int = Field(description="Points stored by this request.")
    duplicates: int = Field(description="Points whose (key, step) was already stored or repeated.")
    replayed: bool = Field(
        default=False,
        description="True when this is the stored answer to an earlier request with the same "
        "Idempotency-Key; nothing was written this time.",
    )


class MetricSeriesPublic(PublicModel):
    """One metric's points in step order, as parallel arrays."""

    key: str
    steps: list[int]
    values: list[float]
    times: list[float] = Field(description="Seconds since the epoch, per point.")
    total_points: int = Field(description="Points in the requested step range before reduction.")
    downsampled: bool = Field(description="True when fewer than `total_points` came back.")


class MetricHistory(PublicModel):
    run_id: int
    series: list[MetricSeriesPublic] = Field(description="By key; keys with no points are absent.")


class MetricKeyPublic(PublicModel):
    key: str
    point_count: int
    last_step: int | None
    last_value: float | None


class MetricKeysPublic(PublicModel):
    run_id: int
    keys: list[MetricKeyPublic]
