"""The files a profiled training run leaves in its outputs, written by hand for the tests of
the API and the CLI that read them."""

import gzip
import json
from pathlib import Path

from crucible.training.profile_summary import FORWARD_BACKWARD_ANNOTATION, summarize_trace

TRACE = {
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": FORWARD_BACKWARD_ANNOTATION, "ts": 0,
         "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 80, "pid": 1, "tid": 1},
    ]
}  # fmt: skip


def leave_profile(directory: Path, name: str, *, summary: bool = True) -> Path:
    """What StepProfiler writes for profile `name`: table, gzipped trace, summary."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.txt").write_text("the kernel table\n")
    trace = directory / f"{name}.trace.json.gz"
    with gzip.open(trace, "wt") as packed:
        json.dump(TRACE, packed)
    if summary:
        (directory / f"{name}.summary.json").write_text(summarize_trace(TRACE).model_dump_json())
    return trace
