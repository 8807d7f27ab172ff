"""A request for every route of the OpenAPI schema: the path with its ids filled in, the
query parameters, and a valid body. Shared by the tenancy matrix and the outage test, so a
route added to the API is exercised by both as soon as it has an example body here."""

from typing import Any

from tests.conftest import training_run

MARKER = "zzbeta"  # in the name of every object of project B; A must never read it
PUBLIC = {"healthz", "readyz", "redeemSignInCode"}  # documented as public in docs/reliability.md
DIGEST = "sha256:" + "c" * 64


def example_bodies(b: dict[str, int]) -> dict[str, Any]:
    """A valid body per operation, naming project B (`b`: its ids) wherever there is a choice."""
    return {
        "createProject": {"name": f"{MARKER}-2"},
        "updateProject": {"description": "taken over"},
        "createToken": {"name": "t", "project": MARKER, "role": "viewer"},
        "createExperiment": {"project": MARKER, "name": "e2"},
        "updateExperiment": {"description": "taken over"},
        "submitRun": {"project": MARKER, "manifest": training_run(name="intruder")},
        "reportRunPhase": {"phase": "Failed", "message": "intruder"},
        "startAttempt": {},
        "endAttempt": {"end_reason": "Failed"},
        "heartbeat": {"attempt": 1},
        "logMetrics": {"points": [{"key": "loss", "step": 99, "value": 0.0}]},
        "registerDatasetVersion": {
            "project": MARKER,
            "name": "d2",
            "uri": "s3://x/d2",
            "digest": DIGEST,
        },
        "linkRunInput": {"dataset_version_id": b["version"]},
        "registerCheckpoint": {"step": 99, "uri": "s3://x/c99", "digest": DIGEST, "size_bytes": 1},
        "recordEvalResult": {"checkpoint_id": b["checkpoint"], "suite": "s", "scores": {"a": 1.0}},
        "reportCluster": {"nodes": [], "pods": []},
    }


def concrete_path(path: str, b: dict[str, int]) -> str:
    values = {
        "project_id": b["project"],
        "run_id": b["run"],
        "experiment_id": b["experiment"],
        "checkpoint_id": b["checkpoint"],
        "version_id": b["version"],
        "dataset_id": b["dataset"],
        "token_id": b["token"],
        "number": 1,
        "entity": "run",
        "entity_id": b["run"],
        "cluster_name": MARKER,
    }
    for name, value in values.items():
        path = path.replace("{" + name + "}", str(value))
    assert "{" not in path, f"give tests/route_examples.py a value for {path}"
    return path


def query_for(b: dict[str, int]) -> dict[str, Any]:
    return {"project": MARKER, "ref": f"{MARKER}-data@latest", "metric": "acc", "ids": b["run"]}
