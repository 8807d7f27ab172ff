"""Fixtures for the workload tests: all on CPU with the tiny preset."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from crucible.workloads.config import TaskConfig
from crucible.workloads.datagen import teach
from crucible.workloads.tasks.arithmetic import ArithmeticTask, SolverTeacher


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
