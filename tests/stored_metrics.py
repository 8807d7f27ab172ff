"""The metric points a database holds, read from their chunks: what the fault tests compare
with what the clients were acknowledged."""

from typing import Any

from sqlalchemy import Connection, text

from crucible.domain.chunks import PackedChunk, unpack

StoredPoint = tuple[int, str, int, float]
"""(run id, key, step, value)"""


def stored_points(connection: Connection, run_id: int | None = None) -> list[StoredPoint]:
    """Every stored point, or those of one run, one tuple a point (a step stored twice
    appears twice)."""
    where = "" if run_id is None else "WHERE s.run_id = :run"
    chunks = connection.execute(
        text(
            'SELECT s.run_id, s.key, c.first_step, c.point_count, c.steps, c."values", c.times '
            f"FROM metric_chunks c JOIN metric_series s ON s.id = c.series_id {where}"
        ),
        {} if run_id is None else {"run": run_id},
    ).all()
    found: list[StoredPoint] = []
    for run, key, first_step, count, steps, values, times in chunks:
        points = unpack(PackedChunk(first_step, count, _bytes(steps), bytes(values), bytes(times)))
        found.extend((run, key, s, v) for s, v in zip(points.steps, points.values, strict=True))
    return found


def stored_point_count(connection: Connection) -> int:
    return int(connection.scalar(text("SELECT coalesce(sum(point_count), 0) FROM metric_chunks")))


def _bytes(data: Any) -> bytes | None:
    return None if data is None else bytes(data)
