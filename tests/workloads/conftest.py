"""Fixtures for the workload tests: all on CPU with the tiny preset."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from crucible.config.workload import TaskConfig, model_preset
from crucible.models.gpt import build_model
from crucible.rollouts.datagen import teach
from crucible.tasks.arithmetic import ArithmeticTask, SolverTeacher


@pytest.fixture(autouse=True)
def _deterministic_threads() -> Iterator[None]:
    # Two shared cores: one intra-op thread keeps tests from fighting each other.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def one_digit_task() -> ArithmeticTask:
    return ArithmeticTask(TaskConfig(digits=1, operators=("+",)))


@pytest.fixture(scope="session")
def one_digit_records(one_digit_task: ArithmeticTask) -> list[dict[str, Any]]:
    return teach(SolverTeacher(), one_digit_task.sample("train", 2000, seed=0))


@pytest.fixture
def model() -> torch.nn.Module:
    """The tiny preset with unit-scale random weights, in eval mode."""
    torch.manual_seed(0)
    # At its small init scale a random model repeats one token whatever the prompt;
    # unit-scale weights make greedy decoding depend on the prompt and on the position.
    model = build_model(model_preset("tiny"))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=1.0)
    return model.eval()
