"""MLflow's tracking API on Crucible's own objects (docs/mlflow.md).

An MLflow experiment is a Crucible experiment, a run a run, a metric a point of the metric
store, a param a key of the run's config, a logged model a checkpoint and `log_input`'s
datasets dataset versions consumed by the run. The modules here turn MLflow's requests
into those objects and back; the routes in crucible.api.routes.mlflow only carry them.
"""
