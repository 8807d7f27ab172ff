"""Ingest a metric batch: each series' new points become a chunk (of at most
`MAX_CHUNK_POINTS`), idempotently.

A (series, step) is stored once. The batch locks its series' rows first; a series whose
stored steps all lie below the batch's (training logging forward, the common case) needs
no other check, and otherwise the steps already stored in the batch's range are read and
dropped. Within a batch the first occurrence of a step wins.

With an Idempotency-Key, the key is claimed before anything is written, so a concurrent
retry waits for the original and then replays its answer.
"""

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.metrics.batches import BatchSeries, series_of
from crucible.core.metrics.store import MetricStore, SeriesGain, SeriesState, store_for
from crucible.db.tables import IdempotencyRecord
from crucible.db.upsert import insert_statement
from crucible.domain.chunks import MAX_CHUNK_POINTS, Chunk, pack
from crucible.domain.enums import Role
from crucible.domain.errors import Conflict
from crucible.schemas.metrics import IngestResult, MetricBatch


def idempotency_scope(run_id: int) -> str:
    return f"metrics:{run_id}"


def ingest(
    *,
    session: Session,
    principal: Principal,
    run_id: int,
    batch: MetricBatch,
    idempotency_key: str | None = None,
    request_digest: str = "",
) -> IngestResult:
    """Store the batch's new points; count the rest as duplicates."""
    store = store_for(session)
    # The run is locked before the access check: one statement instead of two, and a
    # principal without access holds a key-share lock only until its 404 rolls back.
    project_id = store.hold_run(run_id)
    principal.require(project_id, Role.editor, entity="run", key=run_id)
    if idempotency_key is not None:
        replayed = _claim_key(session, run_id, idempotency_key, request_digest)
        if replayed is not None:
            return replayed

    grouped = series_of(batch)
    accepted = 0
    if grouped:
        series = store.lock_series(run_id, sorted(grouped))
        now = time.time()
        chunks: list[tuple[int, Chunk]] = []
        gains: list[SeriesGain] = []
        for key, points in grouped.items():
            new = _new_points(store, series[key], points)
            if new is None:
                continue
            times = [now if t is None else t for t in new.times]
            pieces = [
                pack(new.steps[i:stop], new.values[i:stop], times[i:stop])
                for i in range(0, len(new.steps), MAX_CHUNK_POINTS)
                for stop in (i + MAX_CHUNK_POINTS,)
            ]
            chunks += [(series[key].id, piece) for piece in pieces]
            last = pieces[-1].summary
            gains.append(
                SeriesGain(
                    series[key].id,
                    len(new.steps),
                    last.last_step,
                    last.last_value,
                    max(p.summary.last_step - p.summary.first_step for p in pieces),
                )
            )
        if chunks:
            store.add_chunks(chunks)
            store.apply_gains(gains)
            store.advance_run(run_id, max(g.top_step for g in gains))
            accepted = sum(g.added for g in gains)

    result = IngestResult(accepted=accepted, duplicates=batch.point_count - accepted)
    if idempotency_key is not None:
        _record_result(session, run_id, idempotency_key, request_digest, result)
    return result


@dataclass(frozen=True)
class _Ordered:
    steps: list[int]
    values: list[float]
    times: list[float | None]


def _new_points(store: MetricStore, series: SeriesState, points: BatchSeries) -> _Ordered | None:
    """The points of `points` the series does not hold yet, in step order; None if none."""
    steps = points.steps
    order: Sequence[int]
    if all(a < b for a, b in itertools.pairwise(steps)):
        order = range(len(steps))  # distinct and in order: the usual batch
    else:
        first_at: dict[int, int] = {}
        for position, step in enumerate(steps):
            first_at.setdefault(step, position)
        order = sorted(first_at.values(), key=steps.__getitem__)
    low, high = steps[order[0]], steps[order[-1]]
    if series.last_step is not None and low <= series.last_step:
        stored = store.stored_steps(series, low, high)
        if stored:
            order = [i for i in order if steps[i] not in stored]
            if not order:
                return None
    if isinstance(order, range):
        return _Ordered(steps, points.values, points.times)
    return _Ordered(
        [steps[i] for i in order],
        [points.values[i] for i in order],
        [points.times[i] for i in order],
    )


def _claim_key(session: Session, run_id: int, key: str, digest: str) -> IngestResult | None:
    """Insert the key's record, or return the result stored under it by an earlier request."""
    scope = idempotency_scope(run_id)
    claimed = session.scalar(
        insert_statement(session, IdempotencyRecord)
        .values(scope=scope, key=key, response={"digest": digest})
        .on_conflict_do_nothing()
        .returning(IdempotencyRecord.key)
    )
    if claimed is not None:
        return None
    stored = session.scalar(
        select(IdempotencyRecord.response).where(
            IdempotencyRecord.scope == scope, IdempotencyRecord.key == key
        )
    )
    if stored is None or "result" not in stored:  # claimed and released in between
        raise Conflict(f"the request with Idempotency-Key {key!r} left no answer; retry it")
    if stored.get("digest") != digest:
        raise Conflict(
            f"Idempotency-Key {key!r} was already used for a different batch of points; "
            "send each new batch with a new key"
        )
    return IngestResult.model_validate({**stored["result"], "replayed": True})


def _record_result(
    session: Session, run_id: int, key: str, digest: str, result: IngestResult
) -> None:
    session.execute(
        update(IdempotencyRecord)
        .where(IdempotencyRecord.scope == idempotency_scope(run_id), IdempotencyRecord.key == key)
        .values(response={"digest": digest, "result": result.model_dump(exclude={"replayed"})})
    )
