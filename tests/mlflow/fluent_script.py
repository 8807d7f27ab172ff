"""Ordinary MLflow code, run by the real `mlflow` client in its own environment against
Crucible (test_real_client.py). Nothing here knows of Crucible: the tracking URI and the
token come from MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN.

Prints one JSON line of what it logged, for the test to find again through Crucible's API."""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import mlflow

mlflow.set_experiment("mlflow-fluent")
frame = pd.DataFrame({"x": np.arange(8.0), "y": np.arange(8.0) * 2})

with mlflow.start_run(run_name="fluent-run") as run:
    mlflow.log_params({"lr": 0.01, "optimizer": "adam", "layers": 2})
    for step in range(5):
        mlflow.log_metrics({"loss": 1.0 / (step + 1), "accuracy": step / 5}, step=step)
    with tempfile.TemporaryDirectory() as scratch:
        notes = Path(scratch) / "notes.txt"
        notes.write_text("trained on Crucible\n")
        mlflow.log_artifact(str(notes), artifact_path="reports")
    mlflow.log_input(mlflow.data.from_pandas(frame, name="toy-frame"), context="training")
    mlflow.set_tags({"team": "research", "stage": "smoke"})
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    example = np.zeros((1, 2), dtype=np.float32)
    info = mlflow.pytorch.log_model(model, name="tiny-torch", input_example=example)

found = mlflow.search_runs(
    experiment_names=["mlflow-fluent"],
    filter_string="metrics.loss < 0.5 and params.optimizer = 'adam' and tags.team = 'research'",
    output_format="list",
)
again = mlflow.artifacts.download_artifacts(
    run_id=run.info.run_id, artifact_path="reports/notes.txt"
)
loaded = mlflow.pytorch.load_model(info.model_uri)
print(
    json.dumps(
        {
            "run_id": run.info.run_id,
            "experiment_id": run.info.experiment_id,
            "model_id": info.model_id,
            "found": [r.info.run_id for r in found],
            "artifact": Path(again).read_text(),
            "loaded_params": sum(p.numel() for p in loaded.parameters()),
            "python": sys.executable,
        }
    )
)
