"""Fixtures for the engine's tests: the tiny GPT on CPU, one intra-op thread."""

from collections.abc import Iterator

import pytest
import torch

from crucible.workloads.config import model_preset
from crucible.workloads.model import GPT, build_model


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # Two shared cores: one intra-op thread keeps tests from fighting each other.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model() -> GPT:
    """The tiny preset with unit-scale random weights: greedy decoding then depends on the
    prompt and the position (at the small init scale it repeats one token)."""
    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=1.0)
    return model.eval()
