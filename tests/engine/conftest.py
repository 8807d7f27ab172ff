"""The engine's tests run on the workload tests' fixtures: the tiny GPT with unit-scale
weights (`model`), on one intra-op thread."""

from tests.workloads.conftest import _deterministic_threads, model

__all__ = ["_deterministic_threads", "model"]  # the fixtures, imported for this folder
