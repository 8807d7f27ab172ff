"""Fixtures for the agent tests: the workload tests' one intra-op thread, and the tiny GPT
with a context long enough for a conversation with tools."""

import pytest
import torch

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from tests.workloads.conftest import _deterministic_threads

__all__ = ["_deterministic_threads"]  # the fixture, imported for this folder


@pytest.fixture
def chat_model() -> torch.nn.Module:
    """The tiny preset with unit-scale random weights (as the workload tests' `model`, so
    greedy decoding depends on the prompt), its context stretched to hold a system message
    that describes the tools and a few turns."""
    torch.manual_seed(0)
    model = build_model(model_preset("tiny", max_seq_len=1024))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=1.0)
    return model.eval()
