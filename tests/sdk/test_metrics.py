"""`run.log`: never blocks, batches with idempotency keys, survives an API that is down."""

import logging
import time
from pathlib import Path

import pytest

import crucible
from crucible.client import CrucibleClient
from tests.conftest import ADMIN_TOKEN
from tests.sdk.conftest import ServerProcess, free_port, new_run


def history(api: CrucibleClient, run_id: int) -> dict[str, tuple[list[int], list[float]]]:
    body = api.request("GET", f"/api/v1/runs/{run_id}/metrics")
    return {s["key"]: (s["steps"], s["values"]) for s in body["series"]}


def point_counts(api: CrucibleClient, run_id: int) -> dict[str, int]:
    body = api.request("GET", f"/api/v1/runs/{run_id}/metrics/keys")
    return {k["key"]: k["point_count"] for k in body["keys"]}


def test_20000_points_arrive_exactly_once_across_flushes(
    api: CrucibleClient, sdk_env: Path
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id, flush_interval=0.05)
    for step in range(1000):
        run.log({f"m{k:02d}": step * 100 + k for k in range(20)}, step=step)
        if step == 400:
            assert run.flush(timeout=30)
    run.finish()
    assert point_counts(api, run_id) == {f"m{k:02d}": 1000 for k in range(20)}
    steps, values = history(api, run_id)["m07"]
    assert steps == list(range(1000))
    assert values == [step * 100 + 7 for step in range(1000)]
    assert run.dropped_points == 0


def test_api_down_at_start_then_every_point_arrives(
    tmp_path: Path, sdk_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The training loop keeps its pace while the API is down; memory stays within the bound;
    when the API comes up every point arrives, once."""
    server = ServerProcess(tmp_path)
    server.start()
    with CrucibleClient(server.url, ADMIN_TOKEN) as api:
        run_id = new_run(api)
    server.stop()

    run = crucible.init(
        run_id=run_id, api_url=server.url, max_buffered_points=50_000, max_backoff=0.2
    )
    took = []
    for step in range(2000):
        started = time.perf_counter()
        run.log({f"loss/{k}": float(step) for k in range(10)}, step=step)
        took.append(time.perf_counter() - started)
    time.sleep(0.5)  # several failed sends with backoff
    assert run.pending_points == 20_000
    assert run.dropped_points == 0
    # The pace, not the single slowest call: on two shared cores the scheduler may stall
    # any one call (the fresh-clone CI saw one of 1 s while Go compiled beside it), while a
    # log() that waited for the network would wait on every send's backoff.
    p99 = sorted(took)[len(took) * 99 // 100]
    assert p99 < 0.05, f"99% of log() calls took up to {p99 * 1000:.1f} ms while the API was down"
    unreachable = [r for r in caplog.records if "cannot send metrics" in r.getMessage()]
    assert len(unreachable) == 1, "warns once, not per retry"

    server.start()
    try:
        assert run.flush(timeout=30)
        run.finish()
        with CrucibleClient(server.url, ADMIN_TOKEN) as api:
            assert point_counts(api, run_id) == {f"loss/{k}": 2000 for k in range(10)}
            assert history(api, run_id)["loss/3"][0] == list(range(2000))
    finally:
        server.stop()


def test_past_the_buffer_bound_the_oldest_points_are_dropped_and_counted(
    tmp_path: Path, sdk_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ServerProcess(tmp_path)
    server.start()
    with CrucibleClient(server.url, ADMIN_TOKEN) as api:
        run_id = new_run(api)
    server.stop()

    run = crucible.init(run_id=run_id, api_url=server.url, max_buffered_points=1000)
    for step in range(1500):
        run.log({"loss": float(step)}, step=step)
    assert run.dropped_points == 500
    assert run.pending_points == 1000
    assert any("buffer is full" in r.getMessage() for r in caplog.records)

    server.start()
    try:
        run.finish(timeout=30)
        with CrucibleClient(server.url, ADMIN_TOKEN) as api:
            assert history(api, run_id)["loss"][0] == list(range(500, 1500))
        assert any("500 metric points were dropped" in r.getMessage() for r in caplog.records)
    finally:
        server.stop()


def test_bad_keys_fail_at_the_call_and_non_finite_values_are_skipped(
    api: CrucibleClient, sdk_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    with pytest.raises(ValueError, match="metric key 'a,b' is invalid"):
        run.log({"a,b": 1.0}, step=0)
    run.log({"loss": float("nan"), "acc": 0.5}, step=0)
    run.log({"loss": 1.0, "acc": 0.6}, step=1)
    run.finish()
    assert point_counts(api, run_id) == {"acc": 2, "loss": 1}
    assert any("'loss' is nan at step 0" in r.getMessage() for r in caplog.records)


def test_unreachable_api_never_blocks_finish_forever(sdk_env: Path) -> None:
    run = crucible.init(run_id=1, api_url=f"http://127.0.0.1:{free_port()}")
    run.log({"loss": 1.0}, step=0)
    started = time.monotonic()
    run.finish(timeout=0.5)
    assert time.monotonic() - started < 5
    assert run.pending_points == 1
    logging.getLogger(__name__).info("left %d points unsent, as reported", run.pending_points)
