"""Where a training step's time goes: a few steps recorded with the torch profiler.

`config.train.profile_from_step` and `profile_steps` choose the steps; each rank writes a
kernel table (operators sorted by device time, or CPU time without a GPU), a Chrome/
Perfetto trace of them and the trace's summary (`profile_summary`: top kernels and the time
split into compute, communication, data loading, optimizer and idle) to the run's outputs,
`profile/rank<R>-steps<A>-<B>.txt`, `.trace.json.gz` and `.summary.json`
(`domain/profile_files.py` names them; the API and `crucible runs profiles` read them
there). The other steps run without a profiler.
"""

import contextlib
import gzip
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from crucible.domain.profile_files import (
    SUMMARY_SUFFIX,
    TABLE_SUFFIX,
    TRACE_SUFFIX,
    ProfileName,
)
from crucible.workloads.profile_summary import summarize_trace

log = logging.getLogger(__name__)

TABLE_ROWS = 40


class StepProfiler:
    def __init__(self, directory: Path | None, *, from_step: int, steps: int, rank: int) -> None:
        self._directory = directory
        self._first = from_step
        self._last = from_step + steps - 1
        self._rank = rank
        self._profile: profile | None = None

    @contextlib.contextmanager
    def around(self, step: int) -> Iterator[None]:
        """Run `step` (1-based) inside the profiler when it is one of the chosen steps."""
        if self._directory is None or self._first <= 0 or not self._first <= step <= self._last:
            yield
            return
        if self._profile is None:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._profile = profile(activities=activities)
            self._profile.start()
        yield
        if step == self._last:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self._profile.stop()
            self._write(self._profile)
            self._profile = None

    def _write(self, recorded: profile) -> None:
        assert self._directory is not None
        self._directory.mkdir(parents=True, exist_ok=True)
        name = ProfileName(rank=self._rank, first_step=self._first, last_step=self._last)
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
        log.info("profile of steps %d-%d written to %s.txt", self._first, self._last, stem)

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
