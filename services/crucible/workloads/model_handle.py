"""Moved to `crucible.rollouts.model_handle`; this path keeps user code that imports it working."""

from crucible.workloads._moved import moved

moved(__name__, "crucible.rollouts.model_handle")
