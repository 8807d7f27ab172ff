"""A train run's emulated precisions (mxfp8, nvfp4) through the trainer: refused unless the
run asks for emulation, trained with the numerics statistics logged, and resumed bitwise
(nvfp4's stochastic rounding streams travel in the checkpoint)."""

from typing import Any

import pytest
import torch

from crucible.workloads.checkpoint import DirectoryCheckpointer
from crucible.workloads.config import TrainConfig, model_preset
from crucible.workloads.numerics.emulated_linear import EmulatedLinear
from crucible.workloads.train import Trainer
from tests.workloads.test_train import Preempted, PreemptedAfterSave

TINY = model_preset("tiny")


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_an_emulated_precision_is_refused_unless_the_run_asks_naming_the_device(
    precision: str,
) -> None:
    records = [{"prompt": "1+1=", "completion": "2"}]
    with pytest.raises(ValueError, match=rf"'{precision}' has no native kernels on the CPU"):
        Trainer(TrainConfig(precision=precision), TINY, records)  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_an_emulated_run_trains_and_logs_saturation_and_underflow(
    precision: str, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(
        steps=6,
        batch_size=8,
        seed=1,
        precision=precision,  # type: ignore[arg-type]
        emulate_precision=True,
        fp8_stats_every=3,
    )
    trainer = Trainer(config, TINY, one_digit_records[:32])
    logged: dict[int, dict[str, float]] = {}
    trainer.log = lambda step, metrics: logged.__setitem__(step, metrics)
    losses = trainer.train()

    emulated = [m for m in trainer.raw_model.modules() if isinstance(m, EmulatedLinear)]
    assert emulated and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    numerics = {k for k in logged[3] if k.startswith("numerics/")}
    assert {s for s in (1, 3, 6) if any(k.startswith("numerics/") for k in logged[s])} == {1, 3, 6}
    assert not any(k.startswith("numerics/") for k in logged[2])
    assert any(k.endswith("/input_saturated") for k in numerics)
    assert any(k.endswith("/grad_output_underflow") for k in numerics)
    assert all(0.0 <= logged[3][k] <= 1.0 for k in numerics)
    worst = max(logged[3][k] for k in numerics if k.endswith("_saturated"))
    assert logged[3]["precision/saturated_max"] == worst
    assert "precision/underflow_max" in logged[3]


def test_an_nvfp4_run_resumed_from_its_checkpoint_has_bitwise_the_same_losses(
    tmp_path: Any, one_digit_records: list[dict[str, Any]]
) -> None:
    records = one_digit_records[:20]
    config = TrainConfig(
        steps=6,
        batch_size=8,
        warmup_steps=2,
        checkpoint_every=3,
        seed=3,
        precision="nvfp4",
        emulate_precision=True,
    )
    expected = Trainer(config, TINY, records).train()

    first = Trainer(config, TINY, records, checkpointer=PreemptedAfterSave(tmp_path, 3))
    seen: list[float] = []
    first.log = lambda step, metrics: seen.append(metrics["loss"])
    with pytest.raises(Preempted):
        first.train()
    resumed = Trainer(config, TINY, records, checkpointer=DirectoryCheckpointer(tmp_path))
    assert resumed.step == 3
    assert seen + resumed.train() == expected
