"""A train run's emulated precisions (mxfp8, nvfp4, fine-scaled fp8) through the trainer:
refused unless the run asks for emulation, trained with the numerics statistics logged, on
the built-in GPT and a Llama-architecture model, and resumed bitwise (nvfp4's stochastic
rounding streams travel in the checkpoint)."""

from dataclasses import replace
from typing import Any

import pytest
import torch

from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.config.workload import TrainConfig, model_preset
from crucible.training.checkpoint import DirectoryCheckpointer
from crucible.training.precision.emulated_linear import EmulatedLinear
from crucible.training.train import Trainer
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
    shares = {k for k in numerics if k.endswith(("_saturated", "_underflow"))}
    assert all(0.0 <= logged[3][k] <= 1.0 for k in shares)
    assert all(logged[3][k] > 0 for k in numerics if k.endswith("/input_amax"))
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


@pytest.mark.slow
def test_compile_with_nvfp4_compiles_the_roundings_and_trains_bitwise_as_eager(
    one_digit_records: list[dict[str, Any]],
) -> None:
    """With an emulated precision, `compile` compiles the roundings and leaves the model eager
    (`compiles_whole_model`): the compiled roundings give the eager ones' bits, so the losses
    are the eager run's to the bit, and the backward's operands are logged too."""
    records = one_digit_records[:20]
    config = TrainConfig(
        steps=3, batch_size=8, seed=3, precision="nvfp4", emulate_precision=True, fp8_stats_every=3
    )
    expected = Trainer(config, TINY, records).train()
    torch._dynamo.utils.counters.clear()
    compiled = Trainer(replace(config, compile=True), TINY, records)
    logged: dict[int, dict[str, float]] = {}
    compiled.log = lambda step, metrics: logged.__setitem__(step, metrics)
    assert compiled.batch_loss == compiled.forward_loss
    assert compiled.train() == expected
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0
    assert any(k.endswith("/grad_output_t_saturated") for k in logged[3])


@pytest.mark.parametrize("scaling", ["row", "block"])
def test_fine_scaled_fp8_off_hopper_is_refused_unless_emulated_naming_device_and_scaling(
    scaling: str,
) -> None:
    records = [{"prompt": "1+1=", "completion": "2"}]
    config = TrainConfig(precision="fp8", fp8_scaling=scaling)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"fp8_scaling '{scaling}' has no native kernels on the CPU"
    ):
        Trainer(config, model_preset("small"), records)


def test_fp8_scaling_other_than_tensor_is_refused_for_a_run_not_in_fp8() -> None:
    with pytest.raises(ValueError, match="fp8_scaling='block' applies to precision 'fp8' only"):
        TrainConfig(precision="bf16", fp8_scaling="block")
    with pytest.raises(ValueError, match="fp8_scaling='tile' is not supported"):
        TrainConfig(precision="fp8", fp8_scaling="tile")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("precision", "scaling", "layer_key"),
    [
        ("fp8", "block", "input_amax"),
        ("fp8", "row", "input_amax"),
        ("mxfp8", "tensor", "input_amax"),
    ],
)
def test_a_low_precision_run_logs_amax_and_its_gemm_error_against_bf16_on_sampled_steps(
    precision: str, scaling: str, layer_key: str, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(
        steps=4,
        batch_size=8,
        seed=1,
        precision=precision,  # type: ignore[arg-type]
        fp8_scaling=scaling,  # type: ignore[arg-type]
        emulate_precision=True,
        fp8_stats_every=3,
    )
    trainer = Trainer(config, model_preset("small"), one_digit_records[:32])
    logged: dict[int, dict[str, float]] = {}
    trainer.log = lambda step, metrics: logged.__setitem__(step, metrics)
    losses = trainer.train()

    assert all(torch.isfinite(torch.tensor(losses)))
    prefix = "fp8/" if precision == "fp8" else "numerics/"
    errors = {k: v for k, v in logged[3].items() if k.endswith("/matmul_rel_error")}
    assert errors and all(k.startswith(prefix) for k in errors)
    assert all(0 < v < 0.2 for v in errors.values())
    assert logged[3]["precision/matmul_rel_error_max"] == max(errors.values())
    assert any(k.startswith(prefix) and k.endswith(layer_key) for k in logged[3])
    assert not any(k.endswith("/matmul_rel_error") for k in logged[2])
    assert not any(getattr(m, "sample_error", False) for m in trainer.raw_model.modules())


# A Llama-architecture model whose every Linear width (q, o: 256; k, v: 2 heads of 64; the
# MLP: 512) is a multiple of 128, as fp8 block scaling needs: the study's second model
# (benchmarks/gpu/research_bench.py) in miniature.
LLAMA_128 = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 264,
    "max_position_embeddings": 64,
}


@pytest.mark.parametrize(
    ("precision", "scaling"),
    [("fp8", "block"), ("fp8", "row"), ("mxfp8", "tensor"), ("nvfp4", "tensor")],
)
def test_a_llama_model_trains_in_each_low_precision_with_its_linears_swapped_and_logged(
    precision: str, scaling: str, one_digit_records: list[dict[str, Any]]
) -> None:
    config = TrainConfig(
        steps=4,
        batch_size=8,
        seed=1,
        lr=3e-3,
        precision=precision,  # type: ignore[arg-type]
        fp8_scaling=scaling,  # type: ignore[arg-type]
        emulate_precision=True,
        fp8_stats_every=4,
    )
    spec = ModelSpec(hf=HFModelSource(architecture="llama", config=LLAMA_128))
    trainer = Trainer(config, spec, one_digit_records[:32])
    logged: dict[int, dict[str, float]] = {}
    trainer.log = lambda step, metrics: logged.__setitem__(step, metrics)
    losses = trainer.train()

    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    swapped = {
        name.rsplit(".", 1)[-1]
        for name, module in trainer.raw_model.named_modules()
        if hasattr(module, "sample_error")
    }
    assert swapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    errors = {k: v for k, v in logged[4].items() if k.endswith("/matmul_rel_error")}
    assert len(errors) == 2 * len(swapped) and all(0 < v < 0.3 for v in errors.values())
    # The output head stays in high precision, and the weights load into a plain model.
    assert not any("lm_head" in k for k in logged[4])
    plain = Trainer(TrainConfig(steps=1), spec, one_digit_records[:8])
    plain.raw_model.load_state_dict(trainer.raw_model.state_dict())
