"""`profile_from_step` and live requests (`crucible runs profile`): the chosen steps recorded
with the torch profiler, the others not, and summarised beside the trace by the trainer's
own phase annotations."""

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from crucible.config.workload import TrainConfig, model_preset
from crucible.domain.step_control import BetweenSteps, ProfileOrder
from crucible.schemas.profiles import ProfileSummary
from crucible.training.profiling import ProfileWindow, StepProfiler
from crucible.training.train import Trainer

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


class FakeControl:
    """A run's StepControl as the trainer sees it: a profile request arrives before step
    `at`; every call is recorded with the step the trainer is at."""

    def __init__(self, trainer: Trainer | None, *, at: int, steps: int) -> None:
        self.trainer = trainer
        self.at = at
        self.steps = steps
        self.calls: list[tuple[str, int, tuple[int, ...]]] = []

    def between_steps(self) -> BetweenSteps:
        assert self.trainer is not None
        if self.trainer.step + 1 == self.at:
            return BetweenSteps(profile=ProfileOrder(request_id=7, steps=self.steps))
        return BetweenSteps()

    def profile_started(self, request_id: int, first_step: int, last_step: int) -> None:
        assert self.trainer is not None
        self.calls.append(("started", self.trainer.step, (request_id, first_step, last_step)))

    def profile_done(self, request_id: int) -> None:
        assert self.trainer is not None
        self.calls.append(("done", self.trainer.step, (request_id,)))


def test_a_live_request_is_recorded_from_the_next_step_and_reported_started_then_done(
    tmp_path: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(steps=6, batch_size=4)
    trainer = Trainer(config, TINY, one_digit_records[:16], profile_dir=tmp_path / "profile")
    control = FakeControl(trainer, at=3, steps=2)
    assert len(trainer.train(control=control)) == 6

    # Started before step 3 ran, done once step 4's files were written.
    assert control.calls == [("started", 2, (7, 3, 4)), ("done", 4, (7,))]
    # Named as the spec's profiles are, so the API and the dashboard list them unchanged.
    assert sorted(p.name for p in (tmp_path / "profile").iterdir()) == [
        "rank0-steps3-4.summary.json",
        "rank0-steps3-4.trace.json.gz",
        "rank0-steps3-4.txt",
    ]
    with gzip.open(tmp_path / "profile" / "rank0-steps3-4.trace.json.gz") as trace:
        events = json.load(trace)["traceEvents"]
    optimizer_steps = [e for e in events if e.get("name", "").startswith("Optimizer.step#")]
    assert len(optimizer_steps) == 2


def test_a_request_near_the_end_is_cut_at_the_last_step(
    tmp_path: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(steps=4, batch_size=4)
    trainer = Trainer(config, TINY, one_digit_records[:16], profile_dir=tmp_path / "profile")
    control = FakeControl(trainer, at=3, steps=5)
    trainer.train(control=control)
    assert control.calls == [("started", 2, (7, 3, 4)), ("done", 4, (7,))]
    assert (tmp_path / "profile" / "rank0-steps3-4.summary.json").is_file()


def test_should_stop_and_control_together_are_refused(
    tmp_path: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    trainer = Trainer(TrainConfig(steps=1, batch_size=4), TINY, one_digit_records[:4])
    with pytest.raises(ValueError, match="should_stop or control, not both"):
        trainer.train(should_stop=lambda: False, control=FakeControl(trainer, at=1, steps=1))


def profiler(*, from_step: int = 0, steps: int = 3) -> StepProfiler:
    return StepProfiler(Path("unused"), from_step=from_step, steps=steps, rank=0)


def test_a_live_window_starts_at_the_next_step() -> None:
    window = profiler().schedule(3, next_step=5, final_step=100, request_id=1)
    assert window == ProfileWindow(first=5, last=7, request_id=1)


def test_a_live_window_never_overlaps_the_specs_and_waits_until_after_it() -> None:
    spec = profiler(from_step=10, steps=3)  # records 10-12
    assert spec.schedule(4, next_step=8, final_step=100, request_id=1) == ProfileWindow(13, 16, 1)
    assert spec.schedule(2, next_step=11, final_step=100, request_id=2) == ProfileWindow(17, 18, 2)
    # One that ends before the spec's window starts is left where it is.
    assert spec.schedule(2, next_step=1, final_step=100, request_id=3) == ProfileWindow(1, 2, 3)


def test_a_live_window_is_cut_at_the_last_step_and_none_after_it() -> None:
    assert profiler().schedule(5, next_step=9, final_step=10, request_id=1) == ProfileWindow(
        9, 10, 1
    )
    assert profiler().schedule(5, next_step=11, final_step=10, request_id=1) is None
    nowhere = StepProfiler(None, from_step=0, steps=3, rank=0)
    assert nowhere.schedule(2, next_step=1, final_step=10, request_id=1) is None
