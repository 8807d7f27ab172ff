"""Model FLOPs per step and MFU: what the trainer logs beside tokens/s.

Training FLOPs per token are counted as the built-in GPT's `model.flops_per_token` counts
them, for any model whose matmuls are nn.Linear layers (a Hugging Face Llama too): 6 per
weight of every nn.Linear, the LM head included (a tied head once, as a matmul; embedding
lookups are no matmul), plus attention scores and values, 12 * layers * width * the row's
length. A step's FLOPs take each row's own length for the attention term, so short rows
are not charged the model's whole context.

MFU is those FLOPs per second over the devices' dense bf16 tensor-core peak, the
denominator issue 10 fixed for every precision (an fp8 run's MFU is against bf16's peak,
so the two compare by it). Only for GPUs whose peak is known (`BF16_PEAK_FLOPS`); on the
CPU and an unknown GPU there is no MFU, only model FLOPs per second.
"""

from collections.abc import Sequence

import torch
from torch import nn

from crucible.models.gpt import GPT
from crucible.models.hf import HFCausalLM, LanguageModel

BF16_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
)
"""Dense bf16 peak by a part of the CUDA device's name, first match wins (the vendors'
datasheets; SXM parts unless the name says otherwise)."""


def bf16_peak_flops(device: torch.device) -> float | None:
    """The device's dense bf16 peak FLOP/s, or None when it is not a GPU of the table."""
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))


def peak_for_name(name: str) -> float | None:
    for part, peak in BF16_PEAK_FLOPS:
        if part in name:
            return peak
    return None


class StepFlops:
    """Training FLOPs of a step of `model`, from its rows' lengths."""

    def __init__(self, model: LanguageModel) -> None:
        self.linear_weights = sum(
            m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)
        )
        self.n_layer, self.d_model = _shape(model)

    def per_token(self, row_length: int) -> int:
        return 6 * self.linear_weights + 12 * self.n_layer * self.d_model * row_length

    def of_rows(self, row_targets: Sequence[int]) -> int:
        """FLOPs of one forward and backward over rows of these many trained positions."""
        return sum(length * self.per_token(length) for length in row_targets)


def _shape(model: LanguageModel) -> tuple[int, int]:
    if isinstance(model, GPT):
        return model.config.n_layer, model.config.d_model
    if isinstance(model, HFCausalLM):
        config = model.hf_config
        return int(config.num_hidden_layers), int(config.hidden_size)
    raise TypeError(f"no FLOPs count for {type(model).__name__}")
