"""The settings of the ML half, plain data without torch: workload, engine, sampling and
online-RL settings, the model source, and the job config parser (docs/architecture.md)."""
