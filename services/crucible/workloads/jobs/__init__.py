"""The reference workloads as processes the local executor and Kubernetes pods start.

`python -m crucible.workloads.datagen|train|rollout|eval` runs `main()` of the module of
the same name here. Each reads the environment the backend sets (`runtime.JobEnv`), joins
its run through the SDK and exits 0 on success, 2 on a bad config or spec, and 143 after
saving a checkpoint on SIGTERM. docs/workloads.md describes the contract.
"""
