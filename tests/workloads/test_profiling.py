"""`profile_from_step`: the chosen steps recorded with the torch profiler, the others not,
and summarised beside the trace by the trainer's own phase annotations."""

import gzip
import json
from pathlib import Path
from typing import Any

from crucible.schemas.profiles import ProfileSummary
from crucible.workloads.config import TrainConfig, model_preset
from crucible.workloads.train import Trainer

TINY = model_preset("tiny")


def test_the_chosen_steps_are_profiled_into_a_kernel_table_a_trace_and_a_summary(
    tmp_path: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(steps=6, batch_size=4, profile_from_step=3, profile_steps=2)
    trainer = Trainer(config, TINY, one_digit_records[:16], profile_dir=tmp_path / "profile")
    assert len(trainer.train()) == 6

    assert sorted(p.name for p in (tmp_path / "profile").iterdir()) == [
        "rank0-steps3-4.summary.json",
        "rank0-steps3-4.trace.json.gz",
        "rank0-steps3-4.txt",
    ]
    table = (tmp_path / "profile" / "rank0-steps3-4.txt").read_text()
    assert "aten::mm" in table and "Self CPU" in table
    with gzip.open(tmp_path / "profile" / "rank0-steps3-4.trace.json.gz") as trace:
        events = json.load(trace)["traceEvents"]
    # Two steps' worth of optimizer steps in the trace, not six.
    optimizer_steps = [e for e in events if e.get("name", "").startswith("Optimizer.step#")]
    assert len(optimizer_steps) == 2, sorted({e.get("name") for e in optimizer_steps})

    summary = ProfileSummary.model_validate_json(
        (tmp_path / "profile" / "rank0-steps3-4.summary.json").read_text()
    )
    # Split by the train step's own annotations: each part of the step has time.
    assert summary.timeline == "cpu" and summary.annotated
    phases = {p.phase: p.total_us for p in summary.phases}
    assert phases["compute"] > 0 and phases["data_loading"] > 0 and phases["optimizer"] > 0
    assert phases["communication"] == 0  # one process: no collective
    assert "aten::mm" in {o.name for o in summary.top_operators}


def test_without_profile_from_step_nothing_is_written(
    tmp_path: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(steps=2, batch_size=4)
    Trainer(config, TINY, one_digit_records[:8], profile_dir=tmp_path / "profile").train()
    assert not (tmp_path / "profile").exists()
