"""Moved to `crucible.jobs.eval`; this path keeps specs and scripts that name it working."""

from crucible.workloads._moved import moved

moved(__name__, "crucible.jobs.eval")
