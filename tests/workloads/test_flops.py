"""FLOPs per step and MFU: the count agrees with the GPT's own formula and a hand count of
a Llama, and the trainer logs model FLOPs/s (MFU only where the device's peak is known)."""

import pytest
import torch

from crucible.config.model_source import HFModelSource
from crucible.config.workload import TrainConfig, model_preset
from crucible.models.gpt import build_model, flops_per_token
from crucible.models.hf import build_hf_model
from crucible.training.flops import StepFlops, peak_for_name
from crucible.training.train import Trainer
from tests.workloads.test_hf_model import SMALL


def test_the_gpt_count_is_the_gpts_own_formula() -> None:
    config = model_preset("124M")
    model = build_model(config, device="meta")
    count = StepFlops(model)
    assert count.per_token(1024) == flops_per_token(config, 1024)
    assert count.per_token(10) == flops_per_token(config, 10)


def test_a_llamas_count_is_its_linear_weights_and_attention() -> None:
    model = build_hf_model(HFModelSource(architecture="llama", config=SMALL["llama"]))
    # Per layer q 32x32, k and v 32x16 (2 KV heads of 8), o 32x32, gate and up 32x64, down
    # 64x32; two layers and an untied head of 264x32.
    weights = 2 * (1024 + 512 + 512 + 1024 + 3 * 2048) + 264 * 32
    count = StepFlops(model)
    assert count.linear_weights == weights
    assert count.per_token(40) == 6 * weights + 12 * 2 * 32 * 40
    # A step's rows: each row's tokens at that row's own length.
    assert count.of_rows([3, 5]) == 3 * count.per_token(3) + 5 * count.per_token(5)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_the_peak_comes_from_the_devices_name(name: str, peak: float | None) -> None:
    assert peak_for_name(name) == peak


def test_the_trainer_logs_model_flops_per_second_and_no_mfu_on_the_cpu(
    one_digit_records: list[dict[str, object]],
) -> None:
    logged: list[dict[str, float]] = []
    trainer = Trainer(
        TrainConfig(steps=2, batch_size=8, warmup_steps=1, seed=1),
        model_preset("tiny"),
        one_digit_records[:16],
        log=lambda step, metrics: logged.append(dict(metrics)),
    )
    trainer.train()
    assert trainer.device == torch.device("cpu") and trainer.peak_flops is None
    count = StepFlops(trainer.raw_model)
    for metrics in logged:
        assert "mfu" not in metrics and "model_flops" not in metrics
        flops_per_token = metrics["model_flops_per_s"] / metrics["tokens_per_s"]
        # Between the shortest and the longest row's per-token count (rows of a few tokens).
        assert count.per_token(1) < flops_per_token < count.per_token(64)
