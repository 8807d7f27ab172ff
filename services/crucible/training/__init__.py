"""Training: the trainer, its data, checkpoints, export, FLOPs, parallelism and profiling;
`precision/` holds every low-precision path."""
