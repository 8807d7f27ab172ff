"""`crucible runs profiles RUN_ID`: where a run's profiled steps spent their time, read from
the summaries the trainer writes beside each trace (GET /api/v1/runs/{id}/profiles); and
`crucible runs profile RUN_ID --steps N`, which asks a running run to record its next steps
(POST /api/v1/runs/{id}/profile) and with `--wait` prints their profiles once written."""

import time
from typing import Annotated

import typer

from crucible.cli.common import client
from crucible.cli.output import console, table
from crucible.client import CrucibleClient
from crucible.domain.errors import CrucibleError
from crucible.domain.profile_requests import MAX_PROFILE_STEPS, ProfileRequestState
from crucible.schemas.profiles import ProfilePublic, ProfileRequestPublic, RunProfiles

WAIT_POLL_SECONDS = 1.0
TopOpt = Annotated[
    int, typer.Option(min=1, max=20, help="Kernels (or operators) shown per profile.")
]

LONGEST_NAME = 90
"""Kernel names run to hundreds of characters of template arguments; the start says which."""


def runs_profiles(run_id: int, top: TopOpt = 10) -> None:
    """Show a run's profiles (config.train.profile_from_step): each rank's top kernels and
    how its profiled steps' time split into compute, communication, data loading,
    optimizer and idle."""
    with client() as api:
        profiles = api.list_run_profiles(run_id)
    print_profiles(profiles, top=top)


def runs_profile(
    run_id: int,
    steps: Annotated[
        int,
        typer.Option(help=f"Steps to record from the run's next one (1 to {MAX_PROFILE_STEPS})."),
    ] = 3,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Follow the request until its profiles are written; print them."
        ),
    ] = False,
    top: TopOpt = 10,
) -> None:
    """Ask a Running TrainingRun to record its next steps with the torch profiler. The run
    hears of it with its next heartbeat; the profiles then appear in `crucible runs
    profiles`."""
    with client() as api:
        request = api.request_run_profile(run_id, steps)
        console.print(
            f"profile request {request.id} of run {run_id}: {request.steps} steps from the "
            "step after the run's next heartbeat",
            highlight=False,
        )
        if wait:
            done = _wait_until_done(api, request)
            console.print(f"steps {done.first_step}-{done.last_step} recorded", highlight=False)
            print_profiles(_of_request(api.list_run_profiles(run_id), done), top=top)


def _wait_until_done(api: CrucibleClient, request: ProfileRequestPublic) -> ProfileRequestPublic:
    announced = False
    while True:
        # The run first: a run that reported its profile done and then ended shows both.
        run = api.get_run(request.run_id)
        listed = api.list_run_profiles(request.run_id)
        (current,) = [r for r in listed.requests if r.id == request.id]
        if current.state is ProfileRequestState.done:
            return current
        if current.state is ProfileRequestState.started and not announced:
            announced = True
            console.print(
                f"recording steps {current.first_step}-{current.last_step}", highlight=False
            )
        if run.phase.is_terminal:
            # A request of a run that has ended is never taken up any more.
            raise CrucibleError(
                f"run {run.id} is {run.phase} and its profile request {current.id} is "
                f"{current.state}, not done: it ended before recording the steps"
            )
        time.sleep(WAIT_POLL_SECONDS)


def _of_request(profiles: RunProfiles, request: ProfileRequestPublic) -> RunProfiles:
    """The listing cut to the request's steps (every rank's profile of them)."""
    steps = (request.first_step, request.last_step)
    mine = [p for p in profiles.profiles if (p.first_step, p.last_step) == steps]
    return profiles.model_copy(update={"profiles": mine})


def print_profiles(profiles: RunProfiles, *, top: int) -> None:
    if not profiles.profiles:
        console.print(f"run {profiles.run_id} has no profiles: {profiles.message}", highlight=False)
        return
    for profile in profiles.profiles:
        _print_profile(profiles.run_id, profile, top=top)


def _print_profile(run_id: int, profile: ProfilePublic, *, top: int) -> None:
    steps = f"steps {profile.first_step}-{profile.last_step}, rank {profile.rank}"
    console.print(f"[bold]{profile.name}[/bold] ({steps})", highlight=False)
    if profile.trace_bytes is not None:
        trace = f"/api/v1/runs/{run_id}/profiles/{profile.name}/trace"
        console.print(f"trace: {trace} ({_size(profile.trace_bytes)} gzipped)", highlight=False)
    summary = profile.summary
    if summary is None:
        console.print("no summary beside the trace (recorded before summaries, or unreadable)")
        return
    split = "  ".join(
        f"{phase.phase.replace('_', ' ')} {phase.share:.1%}" for phase in summary.phases
    )
    console.print(
        f"{summary.wall_us / 1000:.1f} ms, split on the {summary.timeline}: {split}"
        + ("" if summary.annotated else " (no crucible/ annotations: split by operator names)"),
        highlight=False,
    )
    what = "kernels" if summary.timeline == "gpu" else "operators (self time)"
    table(
        f"top {what}",
        ["NAME", "CALLS", "TOTAL MS", "SHARE"],
        [
            (_shorten(o.name), o.calls, f"{o.total_us / 1000:.3f}", f"{o.share:.1%}")
            for o in summary.top_operators[:top]
        ],
    )


def _shorten(name: str) -> str:
    return name if len(name) <= LONGEST_NAME else name[: LONGEST_NAME - 1] + "…"


def _size(size: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
