"""Where a training step's time goes: a few steps recorded with the torch profiler.

`config.train.profile_from_step` and `profile_steps` choose steps before the run starts; a
live request (`crucible runs profile`, handed over by `StepControl`) adds a window at run
time, from the next step. Each rank writes, per window, a kernel table (operators sorted by
device time, or CPU time without a GPU), a Chrome/Perfetto trace of them and the trace's
summary (`profile_summary`: top kernels and the time split into compute, communication,
data loading, optimizer and idle) to the run's outputs, `profile/rank<R>-steps<A>-<B>.txt`,
`.trace.json.gz` and `.summary.json` (`domain/profile_files.py` names them; the API and
`crucible runs profiles` read them there). The other steps run without a profiler.
"""

import contextlib
import gzip
import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from crucible.domain.profile_files import (
    SUMMARY_SUFFIX,
    TABLE_SUFFIX,
    TRACE_SUFFIX,
    ProfileName,
)
from crucible.training.profile_summary import summarize_trace

log = logging.getLogger(__name__)

TABLE_ROWS = 40


@dataclass(frozen=True)
class ProfileWindow:
    first: int
    last: int
    request_id: int | None = None
    """The live request it records; None for the spec's window."""


class StepProfiler:
    def __init__(self, directory: Path | None, *, from_step: int, steps: int, rank: int) -> None:
        """directory: where profiles go (None: nowhere, and nothing is recorded).
        from_step, steps: the spec's window (from_step 0: none)."""
        self._directory = directory
        self._rank = rank
        self._windows: list[ProfileWindow] = []
        if from_step > 0:
            self._windows.append(ProfileWindow(first=from_step, last=from_step + steps - 1))
        self._profile: profile | None = None
        self._written: ProfileWindow | None = None

    def schedule(
        self, steps: int, *, next_step: int, final_step: int, request_id: int
    ) -> ProfileWindow | None:
        """Add a window of `steps` steps for a live request: from `next_step`, or right after
        a window it would overlap (the profiler records one window at a time), and cut at
        `final_step`, the run's last. None when no step is left to record, or nothing is
        written anyway (no directory)."""
        if self._directory is None:
            return None
        first = next_step
        for window in sorted(self._windows, key=lambda w: w.first):
            if window.first <= first + steps - 1 and first <= window.last:
                first = window.last + 1
        if first > final_step:
            return None
        window = ProfileWindow(
            first=first, last=min(first + steps - 1, final_step), request_id=request_id
        )
        self._windows.append(window)
        return window

    @contextlib.contextmanager
    def around(self, step: int) -> Iterator[None]:
        """Run `step` (1-based) inside the profiler when a window holds it."""
        window = self._window_of(step)
        if window is None:
            yield
            return
        if self._profile is None:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._profile = profile(activities=activities)
            self._profile.start()
        yield
        if step == window.last:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self._profile.stop()
            self._write(self._profile, window)
            self._profile = None
            self._windows.remove(window)
            self._written = window

    def take_written(self) -> ProfileWindow | None:
        """The window whose files the last `around` wrote, once; None when it wrote none."""
        written, self._written = self._written, None
        return written

    def _window_of(self, step: int) -> ProfileWindow | None:
        if self._directory is None:
            return None
        return next((w for w in self._windows if w.first <= step <= w.last), None)

    def _write(self, recorded: profile, window: ProfileWindow) -> None:
        assert self._directory is not None
        self._directory.mkdir(parents=True, exist_ok=True)
        name = ProfileName(rank=self._rank, first_step=window.first, last_step=window.last)
        stem = self._directory / str(name)
        sort_by = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
        table = recorded.key_averages().table(sort_by=sort_by, row_limit=TABLE_ROWS)
        Path(f"{stem}{TABLE_SUFFIX}").write_text(table + "\n")
        trace = Path(f"{stem}.trace.json")
        recorded.export_chrome_trace(str(trace))
        self._write_summary(trace, Path(f"{stem}{SUMMARY_SUFFIX}"))
        with trace.open("rb") as raw, gzip.open(f"{stem}{TRACE_SUFFIX}", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
        log.info("profile of steps %d-%d written to %s.txt", window.first, window.last, stem)

    @staticmethod
    def _write_summary(trace: Path, summary: Path) -> None:
        # The summary is a reading of the trace, which is already on disk: a trace it cannot
        # read costs the run its summary, not its training.
        try:
            with trace.open("rb") as raw:
                summarized = summarize_trace(json.load(raw))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("no summary of %s: %s", trace, exc)
            return
        summary.write_text(summarized.model_dump_json(indent=1) + "\n")
