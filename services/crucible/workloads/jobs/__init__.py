"""`python -m crucible.workloads.jobs.<job>`: moved to `python -m crucible.jobs.<job>`."""
