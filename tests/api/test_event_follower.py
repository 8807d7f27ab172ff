"""The operator's event follower against a real `crucible server`: it wakes the loops of the
runs that changed, once per event, and says when the feed is not answering."""

import asyncio

import pytest

from crucible.client import ApiError, CrucibleClient
from crucible.domain.enums import Phase
from crucible.schemas.runs import PhaseReport, RunPublic, RunSubmit
from crucible_operator.feed import EventFollower, RunChanges


def submit(api: CrucibleClient, name: str) -> RunPublic:
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"experiment": "feed", "image": "registry.invalid/train:1"},
    }
    return api.submit_run(RunSubmit(project="default", manifest=manifest))  # type: ignore[arg-type]


def test_changed_runs_wake_their_loops_once(live_api: CrucibleClient) -> None:
    ours, also_ours, not_ours = (submit(live_api, n) for n in ("f-a", "f-b", "f-c"))
    changes = RunChanges(uids={ours.id: "uid-a", also_ours.id: "uid-b"})
    woken: list[str] = []
    follower = EventFollower(live_api, changes, woken.append)
    assert not changes.healthy()
    assert asyncio.run(follower.poll()) is False  # the feed starts now: the past wakes nobody
    assert woken == [] and changes.healthy()

    live_api.report_phase(ours.id, PhaseReport(phase=Phase.Scheduling))
    live_api.cancel_run(also_ours.id)
    live_api.report_phase(not_ours.id, PhaseReport(phase=Phase.Scheduling))
    asyncio.run(follower.poll())
    assert sorted(woken) == ["uid-a", "uid-b"]
    assert changes.changed == {ours.id, also_ours.id}

    # Each poll reads back over the last ids (late commits); those already seen wake nobody.
    woken.clear()
    changes.changed.clear()
    asyncio.run(follower.poll())
    assert woken == [] and changes.changed == set()
    live_api.report_phase(ours.id, PhaseReport(phase=Phase.Running))
    asyncio.run(follower.poll())
    assert woken == ["uid-a"]


def test_a_feed_that_does_not_answer_is_not_healthy() -> None:
    changes = RunChanges()
    with CrucibleClient("http://127.0.0.1:9", "t", retries=0, timeout=2) as unreachable:
        follower = EventFollower(unreachable, changes, lambda uid: None)
        with pytest.raises(ApiError, match=r"GET /api/v1/events"):
            asyncio.run(follower.poll())
    assert not changes.healthy()
