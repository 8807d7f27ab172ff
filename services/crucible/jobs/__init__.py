"""The workloads as processes the local executor and Kubernetes pods start:
`python -m crucible.jobs.<job>` for train, rollout, eval, datagen, episodes, online_rl and
tokenizer; the other modules here are their helpers."""
