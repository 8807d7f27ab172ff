"""Sampling from a model through the engine: rollouts, evals, the model handle eval suites are
handed, prompt environments and data generation."""
