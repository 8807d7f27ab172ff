"""The reference workloads as processes the local executor and Kubernetes pods start.

`python -m crucible.workloads.jobs.datagen|train|rollout|eval|tokenizer` runs the job of that
name. Each reads the environment the backend sets (`env.JobEnv`), joins its run through the SDK
and exits 0 on success, 2 on a bad config or spec, and 143 after saving a checkpoint on
SIGTERM (`process.run_job`). docs/workloads.md describes the contract.
"""
