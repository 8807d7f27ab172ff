"""`crucible runs profiles RUN_ID`: where a run's profiled steps spent their time, read from
the summaries the trainer writes beside each trace (GET /api/v1/runs/{id}/profiles)."""

from typing import Annotated

import typer

from crucible.cli.common import client
from crucible.cli.output import console, table
from crucible.schemas.profiles import ProfilePublic, RunProfiles

LONGEST_NAME = 90
"""Kernel names run to hundreds of characters of template arguments; the start says which."""


def runs_profiles(
    run_id: int,
    top: Annotated[
        int, typer.Option(min=1, max=20, help="Kernels (or operators) shown per profile.")
    ] = 10,
) -> None:
    """Show a run's profiles (config.train.profile_from_step): each rank's top kernels and
    how its profiled steps' time split into compute, communication, data loading,
    optimizer and idle."""
    with client() as api:
        profiles = api.list_run_profiles(run_id)
    print_profiles(profiles, top=top)


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
