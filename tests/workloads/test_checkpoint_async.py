"""`config.train.checkpoint_async`: the trainer saves through the run SDK's async DCP path
(one cached writer), and a checkpoint counts as saved only once it is registered."""

import os
import signal
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

import crucible
from crucible.client import CrucibleClient
from crucible.config.workload import TaskConfig, TrainConfig, model_preset
from crucible.jobs.checkpoints import checkpoint_meta
from crucible.sdk import PREEMPTED_EXIT_CODE, CheckpointError, Run
from crucible.sdk.checkpoint import RunCheckpointer
from crucible.training.train import Trainer
from tests.sdk.conftest import api, new_run, sdk_env, server

__all__ = ["api", "sdk_env", "server"]  # the fixtures, imported for this module

TINY = model_preset("tiny")
META = checkpoint_meta(TINY, TaskConfig(digits=1, operators=("+",)), "sft")
CONFIG = TrainConfig(steps=6, batch_size=8, warmup_steps=2, checkpoint_every=2, seed=3)
ASYNC = replace(CONFIG, checkpoint_async=True)


class RecordingCheckpointer(RunCheckpointer):
    """The SDK checkpointer, noting after each save the writer it went through and where
    that writer's staged copy of the weights lives."""

    def __init__(self, run: Run) -> None:
        super().__init__(run._checkpoint_store, resume_from=None, meta=META, async_save=True)
        self.staged: list[tuple[Any, dict[str, int]]] = []

    def save(self, step: int, state: Any) -> None:
        super().save(step, state)
        writer = self.store._async_writer_cached
        weights = writer.state_dict_cache["trainer"]["model"]
        self.staged.append((writer, {k: t.data_ptr() for k, t in weights.items()}))


def resumed(
    run_id: int, records: list[dict[str, Any]], checkpoint_id: int | None = None
) -> Trainer:
    """A trainer resumed from one of run `run_id`'s checkpoints (its latest by default),
    saving nothing itself."""
    run = crucible.init(
        run_id=run_id, resume_from=str(checkpoint_id) if checkpoint_id is not None else None
    )
    trainer = Trainer(CONFIG, TINY, records, checkpointer=run.checkpointer(meta=META))
    run.finish()
    trainer.checkpointer = None
    return trainer


def steps_of(api: CrucibleClient, run_id: int) -> dict[int, int]:
    return {c.step: c.id for c in api.list_checkpoints(run_id).items}


def test_async_checkpoints_resume_like_sync_ones_through_one_writer(
    api: CrucibleClient, sdk_env: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    records = one_digit_records[:20]
    expected = Trainer(CONFIG, TINY, records).train()

    sync_id = new_run(api)
    sync_run = crucible.init(run_id=sync_id)
    sync = Trainer(CONFIG, TINY, records, checkpointer=sync_run.checkpointer(meta=META))
    assert sync.train() == expected
    sync_run.finish()

    async_id = new_run(api)
    async_run = crucible.init(run_id=async_id)
    checkpointer = RecordingCheckpointer(async_run)
    trainer = Trainer(ASYNC, TINY, records, checkpointer=checkpointer)
    assert trainer.train() == expected, "saving in the background changes nothing in training"
    assert trainer.last_checkpoint_step == 6 and trainer.checkpoint_in_flight is None
    async_run.finish()

    # Every save went through one writer and staged into the same buffers.
    assert len(checkpointer.staged) == 3
    assert len({id(writer) for writer, _ in checkpointer.staged}) == 1
    assert checkpointer.staged[0][1] == checkpointer.staged[1][1] == checkpointer.staged[2][1]

    sync_steps, async_steps = steps_of(api, sync_id), steps_of(api, async_id)
    assert sorted(sync_steps) == sorted(async_steps) == [2, 4, 6]
    assert api.get_checkpoint(async_steps[6]).meta == api.get_checkpoint(sync_steps[6]).meta

    # The latest holds the final weights; the middle one resumes to the same run as the
    # sync checkpoint of that step (weights, then the losses of the remaining steps).
    final = resumed(async_id, records)
    assert final.step == 6
    for a, b in zip(final.raw_model.parameters(), trainer.raw_model.parameters(), strict=True):
        assert torch.equal(a, b)
    from_sync = resumed(sync_id, records, sync_steps[4])
    from_async = resumed(async_id, records, async_steps[4])
    assert from_sync.step == from_async.step == 4
    for a, b in zip(
        from_sync.raw_model.parameters(), from_async.raw_model.parameters(), strict=True
    ):
        assert torch.equal(a, b)
    assert from_async.train() == expected[4:] == from_sync.train()


def test_a_run_finishing_right_after_an_async_save_has_it_registered(
    api: CrucibleClient, sdk_env: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    records = one_digit_records[:20]
    config = replace(ASYNC, steps=3, checkpoint_every=0)

    # The SDK: finish() right after a save returns waits for it and registers it.
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    trainer = Trainer(
        config, TINY, records, checkpointer=run.checkpointer(meta=META, async_save=True)
    )
    trainer.save_checkpoint()
    assert trainer.checkpoint_in_flight == 0
    assert trainer.last_checkpoint_step is None, "not reported as saved before it is registered"
    run.finish()
    latest = api.latest_checkpoint(run_id)
    assert latest is not None and latest.step == 0

    # The trainer: train() returns only once its last save is registered.
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    trainer = Trainer(
        config, TINY, records, checkpointer=run.checkpointer(meta=META, async_save=True)
    )
    trainer.train()
    latest = api.latest_checkpoint(run_id)
    assert latest is not None and latest.step == 3 == trainer.last_checkpoint_step
    assert trainer.checkpoint_in_flight is None
    run.finish()


def test_sigterm_right_after_an_async_save_waits_for_it_and_exits_143(
    api: CrucibleClient, sdk_env: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    records = one_digit_records[:20]
    signals: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        run_id = new_run(api)
        run = crucible.init(run_id=run_id)
        checkpointer = run.checkpointer(meta=META, async_save=True)
        trainer = Trainer(ASYNC, TINY, records, checkpointer=checkpointer)

        def log(step: int, metrics: dict[str, float]) -> None:
            if step == 2:  # SIGTERM during step 2, whose checkpoint is saved next
                os.kill(os.getpid(), signal.SIGTERM)

        trainer.log = log
        trainer.train(should_stop=run.should_checkpoint)
        assert trainer.stopped and trainer.step == 2
        assert trainer.last_checkpoint_step == 2 and trainer.checkpoint_in_flight is None
        assert list(steps_of(api, run_id)) == [2], "the step in flight is not saved twice"
        with pytest.raises(SystemExit) as exited:
            run.finish(preempted=True)
        assert exited.value.code == PREEMPTED_EXIT_CODE
        assert signals == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, original)

    again = resumed(run_id, records)
    assert again.step == 2


def test_a_failed_async_save_is_never_reported_as_saved(
    api: CrucibleClient, sdk_env: Path, one_digit_records: list[dict[str, Any]]
) -> None:
    records = one_digit_records[:20]
    run_id = new_run(api)
    run = crucible.init(run_id=run_id)
    trainer = Trainer(
        ASYNC, TINY, records, checkpointer=run.checkpointer(meta=META, async_save=True)
    )
    trainer.save_checkpoint()
    trainer.wait_for_checkpoint()
    assert trainer.last_checkpoint_step == 0

    # Step 0's directory now exists under the final name: saving a different state for
    # step 0 again fails when its background commit compares the two.
    trainer.train_step()
    trainer.save_checkpoint()
    with pytest.raises(CheckpointError, match="already holds a different checkpoint"):
        trainer.wait_for_checkpoint()
    assert trainer.last_checkpoint_step == 0 and trainer.checkpoint_in_flight is None
    assert list(steps_of(api, run_id)) == [0]
    run.finish()
