"""Reference PyTorch workloads: a small GPT, the arithmetic task, SFT/RL training, rollouts, evals.

This package is a pure library: no platform calls, and nothing in it imports `jobs/`. The
jobs (`python -m crucible.workloads.jobs.<name>`) wire it to the run SDK through the seams
each module exposes (a `Checkpointer`, a metrics callback, plain file paths).
"""
