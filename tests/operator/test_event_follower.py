"""The operator's event follower against a real `crucible server`: it wakes the loops of the
runs that changed, once per event, hands them new checkpoints and preempt requests without
marking the run changed, and says when the feed is not answering."""

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from crucible.client import ApiError, CrucibleClient
from crucible.client.async_http import AsyncCrucibleClient
from crucible.domain.enums import Phase
from crucible.schemas.lineage import CheckpointCreate, EvalResultCreate
from crucible.schemas.runs import AttemptStart, PhaseReport, RunPublic, RunSubmit
from crucible_operator.feed import CheckpointSeen, EventFollower, Known, RunChanges
from tests import checkpoint_files
from tests.servers import LocalServer

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture
def feed_api(live_server: LocalServer) -> Iterator[tuple[AsyncCrucibleClient, Run]]:
    """The operator's client on an event loop of its own that outlives each poll (its
    connections belong to that loop), and how to run a poll on it."""
    loop = asyncio.new_event_loop()
    api = AsyncCrucibleClient(live_server.url, live_server.token)
    yield api, loop.run_until_complete
    loop.run_until_complete(api.close())
    loop.close()


def submit(api: CrucibleClient, name: str) -> RunPublic:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "feed", "image": "registry.invalid/train:1"},
    }
    return api.submit_run(RunSubmit(project="default", manifest=manifest))  # type: ignore[arg-type]


def test_changed_runs_wake_their_loops_once(
    live_api: CrucibleClient, feed_api: tuple[AsyncCrucibleClient, Run]
) -> None:
    operator_api, on_loop = feed_api
    ours, also_ours, not_ours = (submit(live_api, n) for n in ("f-a", "f-b", "f-c"))
    changes = RunChanges(uids={ours.id: "uid-a", also_ours.id: "uid-b"})
    woken: list[str] = []
    follower = EventFollower(operator_api, changes, woken.append)
    assert not changes.healthy()
    assert on_loop(follower.poll()) is False  # the feed starts now: the past wakes nobody
    assert woken == [] and changes.healthy()

    live_api.report_phase(ours.id, PhaseReport(phase=Phase.Scheduling))
    live_api.cancel_run(also_ours.id)
    live_api.report_phase(not_ours.id, PhaseReport(phase=Phase.Scheduling))
    on_loop(follower.poll())
    assert sorted(woken) == ["uid-a", "uid-b"]
    assert changes.changed == {ours.id, also_ours.id}

    # Each poll reads back over the last ids (late commits); those already seen wake nobody.
    woken.clear()
    changes.changed.clear()
    on_loop(follower.poll())
    assert woken == [] and changes.changed == set()
    live_api.report_phase(ours.id, PhaseReport(phase=Phase.Running))
    on_loop(follower.poll())
    assert woken == ["uid-a"]


def checkpoint_uri(run: RunPublic, step: int) -> str:
    """In the run's folder under a root of the test server, where the API takes its checkpoints."""
    return (checkpoint_files.ROOT / "runs" / str(run.id) / str(step)).as_uri()


def checkpoint(api: CrucibleClient, run: RunPublic, step: int) -> int:
    created = api.register_checkpoint(
        run.id,
        CheckpointCreate(
            step=step, uri=checkpoint_uri(run, step), digest="sha256:" + "c" * 64, size_bytes=1
        ),
    )
    return created.id


def test_checkpoints_and_preempt_requests_come_with_the_wake_and_need_no_read(
    live_api: CrucibleClient,
    feed_api: tuple[AsyncCrucibleClient, Run],
) -> None:
    operator_api, on_loop = feed_api
    run = submit(live_api, "f-ckpt")
    live_api.report_phase(run.id, PhaseReport(phase=Phase.Scheduling))
    live_api.start_attempt(run.id, AttemptStart())
    live_api.report_phase(run.id, PhaseReport(phase=Phase.Running))
    changes = RunChanges(uids={run.id: "uid-ckpt"})
    woken: list[str] = []
    follower = EventFollower(operator_api, changes, woken.append)
    assert not changes.covers(0.0)  # no answer yet: a loop reads the API itself
    on_loop(follower.poll())
    assert changes.first_answered_at is not None
    assert not changes.covers(changes.first_answered_at - 1)  # looked before the feed began
    assert changes.covers(changes.first_answered_at)
    on_loop(follower.poll())  # reads back over the overlap: the run's earlier events
    changes.changed.clear()
    woken.clear()

    low = checkpoint(live_api, run, 100)
    high = checkpoint(live_api, run, 300)
    checkpoint(live_api, run, 200)  # a late upload of an older step is not the newest
    live_api.preempt_run(run.id)
    on_loop(follower.poll())
    assert woken == ["uid-ckpt"]
    assert changes.changed == set()  # nothing the loop has to read the run for
    assert changes.checkpoints == {run.id: CheckpointSeen(high, 300, checkpoint_uri(run, 300))}
    assert low != high
    assert changes.preempt_requests == {run.id: {1}}

    live_api.cancel_run(run.id)  # any other event still marks the run changed
    on_loop(follower.poll())
    assert changes.changed == {run.id}
    changes.forget(run.id)
    assert (changes.uids, changes.changed, changes.checkpoints, changes.preempt_requests) == (
        {},
        set(),
        {},
        {},
    )


def test_events_the_loops_last_answer_already_shows_wake_nobody(
    live_api: CrucibleClient, feed_api: tuple[AsyncCrucibleClient, Run]
) -> None:
    operator_api, on_loop = feed_api
    run = submit(live_api, "f-known")
    changes = RunChanges(uids={run.id: "uid-known"})
    woken: list[str] = []
    follower = EventFollower(operator_api, changes, woken.append)
    on_loop(follower.poll())
    on_loop(follower.poll())  # the overlap: the run's earlier events
    changes.changed.clear()
    woken.clear()

    # The loop's own reports, each answer told to the follower (reconcile.Pass._know) before
    # the follower's next poll, as the seconds between them on a cluster make it.
    live_api.report_phase(run.id, PhaseReport(phase=Phase.Scheduling))
    changes.known[run.id] = Known(Phase.Scheduling.value, 0)
    on_loop(follower.poll())
    live_api.start_attempt(run.id, AttemptStart())
    changes.known[run.id] = Known(Phase.Scheduling.value, 1)
    on_loop(follower.poll())
    live_api.report_phase(run.id, PhaseReport(phase=Phase.Running))
    changes.known[run.id] = Known(Phase.Running.value, 1)
    on_loop(follower.poll())
    assert changes.changed == set() and woken == []  # none of them needs a read

    saved = checkpoint(live_api, run, 10)
    live_api.record_eval(EvalResultCreate(checkpoint_id=saved, suite="heldout", scores={"acc": 1}))
    on_loop(follower.poll())
    assert changes.changed == set()
    assert woken == ["uid-known"]  # the checkpoint, for the status
    assert changes.checkpoints[run.id].id == saved

    # A report's event seen only after the loop moved on is not the phase it knows: one read
    # too many, never a change missed.
    live_api.report_phase(run.id, PhaseReport(phase=Phase.Interrupted))
    changes.known[run.id] = Known(Phase.Recovering.value, 1)
    on_loop(follower.poll())
    assert changes.changed == {run.id}
    changes.changed.clear()
    changes.known[run.id] = Known(Phase.Interrupted.value, 1)

    live_api.cancel_run(run.id)  # a move the loop did not make
    woken.clear()
    on_loop(follower.poll())
    assert changes.changed == {run.id} and woken == ["uid-known"]


def test_a_feed_that_does_not_answer_is_not_healthy() -> None:
    changes = RunChanges()

    async def poll_once() -> None:
        unreachable = AsyncCrucibleClient("http://127.0.0.1:9", "t", retries=0, timeout=2)
        try:
            await EventFollower(unreachable, changes, lambda uid: None).poll()
        finally:
            await unreachable.close()

    with pytest.raises(ApiError, match=r"GET /api/v1/events"):
        asyncio.run(poll_once())
    assert not changes.healthy()
