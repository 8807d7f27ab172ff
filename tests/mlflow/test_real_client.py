"""The real `mlflow==3.17.2` client, in its own environment, logging to Crucible through the
MLflow routes; then the same objects read back through Crucible's own REST API.

Marked slow: the first run installs the client (tests/mlflow/mlflow_env.py), later runs reuse
it; the scripts import torch, which takes seconds on its own."""

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import make_project, make_token, postgres_only
from tests.mlflow.mlflow_env import run_with_mlflow
from tests.servers import app_in_thread, crucible

pytestmark = [pytest.mark.slow, postgres_only]
HERE = Path(__file__).parent


@pytest.fixture
def served(app: FastAPI, admin: TestClient) -> Iterator[tuple[str, str]]:
    """The app on a port, and an editor token of project `vision`."""
    make_project(admin, "vision")
    token = make_token(admin, "vision", "editor")
    with app_in_thread(app) as url:
        yield url, token


def _script(name: str, url: str, token: str, **extra: str) -> dict[str, Any]:
    env = {"MLFLOW_TRACKING_URI": f"{url}/mlflow", "MLFLOW_TRACKING_TOKEN": token, **extra}
    done = run_with_mlflow(HERE / name, env)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _get(admin: TestClient, path: str) -> Any:
    response = admin.get(f"/api/v1{path}")
    assert response.status_code == 200, response.text
    return response.json()


def test_fluent_script_logs_to_crucible_objects(served: tuple[str, str], admin: TestClient) -> None:
    url, token = served
    logged = _script("fluent_script.py", url, token)
    run_id = int(logged["run_id"])
    assert logged["found"] == [logged["run_id"]]
    assert logged["artifact"] == "trained on Crucible\n"
    assert logged["loaded_params"] == 2 * 4 + 4 + 4 * 1 + 1

    run = _get(admin, f"/runs/{run_id}")
    assert run["phase"] == "Succeeded"
    assert run["kind"] == "train"
    assert run["manifest"]["spec"]["experiment"] == "mlflow-fluent"
    assert run["manifest"]["spec"]["config"] == {"lr": "0.01", "optimizer": "adam", "layers": "2"}
    assert run["tags"]["team"] == "research"
    assert run["tags"]["mlflow.runName"] == "fluent-run"

    history = _get(admin, f"/runs/{run_id}/metrics?keys=loss")
    (loss,) = history["series"]
    assert loss["steps"] == [0, 1, 2, 3, 4]
    assert loss["values"] == pytest.approx([1.0, 0.5, 1 / 3, 0.25, 0.2])

    (checkpoint,) = _get(admin, f"/runs/{run_id}/checkpoints")["items"]
    assert checkpoint["meta"]["mlflow_model_id"] == logged["model_id"]
    assert checkpoint["digest"].startswith("sha256:")
    assert checkpoint["size_bytes"] > 0

    (dataset_input,) = _get(admin, f"/runs/{run_id}/inputs")
    assert dataset_input["label"] == "toy-frame@1"
    version = _get(admin, f"/datasets/versions/{dataset_input['dataset_version_id']}")
    assert version["schema"]["mlflow"]["dataset"]["name"] == "toy-frame"

    # The same run through Crucible's CLI, with the same token.
    cli = {**os.environ, "CRUCIBLE_API_URL": url, "CRUCIBLE_TOKEN": token, "COLUMNS": "200"}
    shown = crucible(cli, "runs", "show", str(run_id))
    assert shown.returncode == 0, shown.stderr
    assert run["name"] in shown.stdout and "Succeeded" in shown.stdout, shown.stdout


def test_hugging_face_trainer_logs_unchanged(served: tuple[str, str], admin: TestClient) -> None:
    url, token = served
    logged = _script(
        "trainer_script.py", url, token, MLFLOW_EXPERIMENT_NAME="hf-trainer", HF_HUB_OFFLINE="1"
    )
    run_id = int(logged["run_id"])
    run = _get(admin, f"/runs/{run_id}")
    assert run["manifest"]["spec"]["experiment"] == "hf-trainer"
    assert run["manifest"]["spec"]["config"]["max_steps"] == "6"
    history = _get(admin, f"/runs/{run_id}/metrics")
    keys = {series["key"]: series["steps"] for series in history["series"]}
    assert keys["loss"] == [2, 4, 6]
    assert "train_runtime" in keys
