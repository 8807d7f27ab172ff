"""A validated metric batch regrouped by key: what the store writes one chunk of each."""

from dataclasses import dataclass, field

from crucible.schemas.metrics import MetricBatch


@dataclass
class BatchSeries:
    """One key's points in batch order (a step may repeat: the first occurrence wins); a
    time of None means "when received"."""

    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)


def series_of(batch: MetricBatch) -> dict[str, BatchSeries]:
    """Key -> its points, in the order the batch gives them: `points`, `rows`, `columns`."""
    grouped: dict[str, BatchSeries] = {}
    for point in batch.points:
        series = grouped.get(point["key"])
        if series is None:
            series = grouped[point["key"]] = BatchSeries()
        series.steps.append(point["step"])
        series.values.append(point["value"])
        series.times.append(point.get("time"))
    for row in batch.rows:
        step, time = row["step"], row.get("time")
        for key, value in row["values"].items():
            series = grouped.get(key)
            if series is None:
                series = grouped[key] = BatchSeries()
            series.steps.append(step)
            series.values.append(value)
            series.times.append(time)
    for group in batch.columns:
        width = len(group.keys)
        times: list[float | None] = (
            [None] * len(group.steps) if group.times is None else list(group.times)
        )
        for position, key in enumerate(group.keys):
            series = grouped.get(key)
            if series is None:
                series = grouped[key] = BatchSeries()
            series.steps += group.steps
            series.values += group.values[position::width]
            series.times += times
    return grouped
