"""A profile asked of a running train run (`crucible runs profile ID --steps N`): how many
steps one request may ask for, and the states it goes through.

The API stores the request; the run's SDK hears of it in a heartbeat's answer, the trainer
records the steps at its next step boundary, and the SDK reports them back in its next
heartbeats (docs/workloads.md, "Profiling a running run").
"""

from enum import StrEnum

MAX_PROFILE_STEPS = 20
"""A profiler records every operator of every step it sees: a few steps tell where the time
goes, and a long window slows the run and writes a trace too large to open."""


class ProfileRequestState(StrEnum):
    pending = "pending"
    """Stored; the run has not started recording it yet."""
    started = "started"
    """The trainer chose its steps (`first_step`-`last_step`) and is recording them."""
    done = "done"
    """Every rank wrote its files; `GET /runs/{id}/profiles` lists them."""
