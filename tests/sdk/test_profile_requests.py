"""Live profile requests in the SDK: the heartbeat brings the request, the training loop takes
it once at a step boundary (the same on every rank, in the collective the preemption check
already costs), and its progress goes back with the next heartbeats."""

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.multiprocessing.spawn import spawn

import crucible
from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from crucible.domain.profile_requests import ProfileRequestState
from crucible.domain.step_control import BetweenSteps, ProfileOrder
from crucible.schemas.profiles import ProfileProgress, ProfileRequestPublic
from crucible.schemas.runs import PhaseReport
from crucible.sdk.profile_requests import ProfileRequestMailbox
from crucible.sdk.step_control import RunStepControl
from tests.conftest import ADMIN_TOKEN
from tests.sdk.conftest import ServerProcess, free_port, new_run


def offered(request_id: int, steps: int = 3) -> ProfileRequestPublic:
    return ProfileRequestPublic.model_validate(
        {
            "id": request_id,
            "run_id": 1,
            "steps": steps,
            "state": "pending",
            "first_step": None,
            "last_step": None,
            "requested_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )


def progress(request_id: int, state: str) -> ProfileProgress:
    return ProfileProgress.model_validate(
        {"request_id": request_id, "state": state, "first_step": 4, "last_step": 6}
    )


def test_a_request_is_taken_once_and_not_offered_again_while_the_api_still_names_it() -> None:
    mailbox = ProfileRequestMailbox()
    assert mailbox.take() is None
    mailbox.offer(offered(3, steps=2))
    assert mailbox.take() == ProfileOrder(request_id=3, steps=2)
    assert mailbox.take() is None
    mailbox.offer(offered(3))  # still open on the API until its files are written
    assert mailbox.take() is None
    mailbox.offer(offered(4))
    mailbox.offer(None)  # no open request any more: nothing to take
    assert mailbox.take() is None


def test_progress_is_sent_until_a_heartbeat_carrying_it_is_answered() -> None:
    mailbox = ProfileRequestMailbox()
    started, done = progress(3, "started"), progress(3, "done")
    mailbox.report(started)
    assert mailbox.progress_to_send() == started
    mailbox.report(done)  # newer, before the beat with `started` was answered
    mailbox.sent(started)
    assert mailbox.progress_to_send() == done
    mailbox.sent(done)
    assert mailbox.progress_to_send() is None


def test_one_process_gets_the_request_with_its_stop_flag_and_reports_without_waiting() -> None:
    mailbox = ProfileRequestMailbox()
    woken: list[bool] = []
    control = RunStepControl(
        preempted=lambda: False, profile_requests=mailbox, report_now=lambda: woken.append(True)
    )
    assert control.between_steps() == BetweenSteps()
    mailbox.offer(offered(5, steps=2))
    assert control.between_steps() == BetweenSteps(profile=ProfileOrder(5, 2))
    assert control.between_steps() == BetweenSteps()
    control.profile_started(5, 10, 11)
    assert mailbox.progress_to_send() == ProfileProgress(
        request_id=5, state=ProfileRequestState.started, first_step=10, last_step=11
    )
    control.profile_done(5)
    assert mailbox.progress_to_send() == ProfileProgress(
        request_id=5, state=ProfileRequestState.done, first_step=10, last_step=11
    )
    assert woken == [True, True]


def wait_until(what: str, done: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := done()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def running_run(api: CrucibleClient) -> int:
    run_id = new_run(api)
    for phase in (Phase.Scheduling, Phase.Running):
        api.report_phase(run_id, PhaseReport(phase=phase))
    return run_id


def test_the_run_hears_of_a_request_through_its_heartbeats_and_reports_it_back(
    api: CrucibleClient, sdk_env: Path
) -> None:
    run_id = running_run(api)
    request = api.request_run_profile(run_id, 2)
    # Beats a minute apart: the first brings the request, and progress must not wait for
    # the next.
    run = crucible.init(run_id=run_id, attempt=1, heartbeat_interval=60)
    try:
        control = run.step_control()
        between = wait_until("the request", lambda: control.between_steps().profile)
        assert between == ProfileOrder(request_id=request.id, steps=2)

        def state() -> tuple[str, int | None, int | None]:
            (listed,) = api.list_run_profiles(run_id).requests
            return (listed.state, listed.first_step, listed.last_step)

        control.profile_started(request.id, 41, 42)
        wait_until("started", lambda: state() == ("started", 41, 42), timeout=10)
        assert control.between_steps().profile is None  # taken already
        control.profile_done(request.id)
        wait_until("done", lambda: state() == ("done", 41, 42), timeout=10)
    finally:
        run.finish()


def test_progress_reported_just_before_the_end_is_sent_by_the_last_beat(
    api: CrucibleClient, sdk_env: Path
) -> None:
    run_id = running_run(api)
    request = api.request_run_profile(run_id, 1)
    run = crucible.init(run_id=run_id, attempt=1, heartbeat_interval=60)
    control = run.step_control()
    wait_until("the request", lambda: control.between_steps().profile)
    control.profile_started(request.id, 9, 9)
    control.profile_done(request.id)
    run.finish()
    (listed,) = api.list_run_profiles(run_id).requests
    assert (listed.state, listed.first_step, listed.last_step) == ("done", 9, 9)


def worker(rank: int, world: int, url: str, run_id: int, home: str, port: int) -> None:
    os.environ |= {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "CRUCIBLE_API_URL": url,
        "CRUCIBLE_TOKEN": ADMIN_TOKEN,
        "CRUCIBLE_HOME": home,
        "CRUCIBLE_RUN_ID": str(run_id),
        "CRUCIBLE_ATTEMPT": "1",
    }
    dist.init_process_group("gloo", rank=rank, world_size=world)
    run = crucible.init(heartbeat_interval=0.1)
    control = run.step_control()
    seen: list[list[Any]] = []
    # Every rank asks at every "step" and stops at the same one: the answers are collective.
    for step in range(1, 1000):
        between = control.between_steps()
        if between.profile is not None:
            seen.append([step, between.profile.request_id, between.profile.steps])
            break
        time.sleep(0.02)
    Path(home, f"rank{rank}.json").write_text(json.dumps(seen))
    run.finish()
    dist.barrier()
    dist.destroy_process_group()


def test_every_rank_gets_rank_0s_request_at_the_same_step(
    server: ServerProcess, api: CrucibleClient, tmp_path: Path
) -> None:
    run_id = running_run(api)
    request = api.request_run_profile(run_id, 4)
    home = tmp_path / "home"
    home.mkdir()
    spawn(worker, args=(2, server.url, run_id, str(home), free_port()), nprocs=2, join=True)  # type: ignore[no-untyped-call]
    seen = [json.loads((home / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert seen[0] == seen[1], "both ranks took the request at the same step"
    ((step, request_id, steps),) = seen[0]
    assert (request_id, steps) == (request.id, 4) and step > 1
