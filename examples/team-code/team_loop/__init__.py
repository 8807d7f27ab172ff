"""A team's own loop code: a teacher, a reward and an eval suite (docs/workloads.md)."""
