"""A request for every route of the OpenAPI schema: the path with its ids filled in, the
query parameters, and a valid body. Shared by the tenancy matrix and the outage test, so a
route added to the API is exercised by both as soon as it has an example body here."""

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import SHARED_BUCKET, make_project, training_run

MARKER = "zzbeta"  # in the name of every object of project B; A must never read it
PUBLIC = {"healthz", "readyz", "redeemSignInCode"}  # documented as public in docs/reliability.md
DIGEST = "sha256:" + "c" * 64
DEPLOYMENT = f"{MARKER}-served"


def sweep(name: str) -> dict[str, Any]:
    """A minimal valid Sweep manifest: one trial of a grid of one learning rate."""
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": {
            "method": "grid",
            "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"trials": 1},
            "parameters": {"config.train.lr": {"values": [0.001]}},
            "run": {"experiment": "e", "config": {"train": {"steps": 10}}},
        },
    }


def example_bodies(b: dict[str, int]) -> dict[str, Any]:
    """A valid body per operation, naming project B (`b`: its ids) wherever there is a choice."""
    return {
        "createProject": {"name": f"{MARKER}-2"},
        "updateProject": {"description": "taken over"},
        "createToken": {"name": "t", "project": MARKER, "role": "viewer"},
        "createExperiment": {"project": MARKER, "name": "e2"},
        "updateExperiment": {"description": "taken over"},
        "submitRun": {"project": MARKER, "manifest": training_run(name="intruder")},
        "submitSweep": {"project": MARKER, "manifest": sweep("intruder")},
        "validateManifest": {"project": MARKER, "manifest": training_run(name="intruder")},
        "reportRunPhase": {"phase": "Failed", "message": "intruder"},
        "startAttempt": {},
        "endAttempt": {"end_reason": "Failed"},
        "heartbeat": {"attempt": 1},
        "requestRunProfile": {"steps": 3},
        "reportEnvironment": {"packages": {"torch": "2.5.0"}},
        "logMetrics": {"points": [{"key": "loss", "step": 99, "value": 0.0}]},
        "registerDatasetVersion": {
            "project": MARKER,
            "name": "d2",
            "uri": f"{SHARED_BUCKET}/x/d2",
            "digest": DIGEST,
        },
        "linkRunInput": {"dataset_version_id": b["version"]},
        "registerCheckpoint": {
            "step": 99,
            "uri": f"{SHARED_BUCKET}/runs/{b['run']}/c99",
            "digest": DIGEST,
            "size_bytes": 1,
        },
        "recordEvalResult": {"checkpoint_id": b["checkpoint"], "suite": "s", "scores": {"a": 1.0}},
        "registerArtifact": {
            "project": MARKER,
            "kind": "model",
            "name": "a2",
            "uri": f"{SHARED_BUCKET}/x/a2",
            "digest": DIGEST,
            "size_bytes": 1,
            "sources": [{"type": "checkpoint", "id": b["checkpoint"]}],
        },
        "reportCluster": {"nodes": [], "pods": []},
        "reportDeployment": {
            "checkpoint": {"id": b["checkpoint"]},
            "replicas": 1,
            "ready_replicas": 0,
            "phase": "Pending",
        },
        "promoteCheckpoint": {"checkpoint_id": b["checkpoint"]},
        "redeemSignInCode": {"code": "not-a-code"},
    }


def concrete_path(path: str, b: dict[str, int]) -> str:
    values = {
        "project_id": b["project"],
        "run_id": b["run"],
        "experiment_id": b["experiment"],
        "checkpoint_id": b["checkpoint"],
        "version_id": b["version"],
        "dataset_id": b["dataset"],
        "artifact_id": b["artifact"],
        "token_id": b["token"],
        "number": 1,
        "entity": "run",
        "entity_id": b["run"],
        "cluster_name": MARKER,
        "deployment_id": b["deployment"],
        "sweep_id": b["sweep"],
        "backend": "kubernetes",
        "project": MARKER,
        "name": DEPLOYMENT,
    }
    for name, value in values.items():
        path = path.replace("{" + name + "}", str(value))
    assert "{" not in path, f"give tests/route_examples.py a value for {path}"
    return path


def query_for(b: dict[str, int]) -> dict[str, Any]:
    return {"project": MARKER, "ref": f"{MARKER}-data@latest", "metric": "acc", "ids": b["run"]}


def project_b(admin: TestClient) -> dict[str, int]:
    """Project B with one of everything, made by the global admin; returns their ids."""
    project = make_project(admin, MARKER)
    run = admin.post(
        "/api/v1/runs",
        json={
            "project": MARKER,
            "manifest": training_run(name=f"{MARKER}-run", experiment=f"{MARKER}-exp"),
        },
    ).json()
    assert admin.post(f"/api/v1/runs/{run['id']}/attempts", json={}).status_code == 201
    points = [{"key": f"{MARKER}/loss", "step": 1, "value": 1.0}]
    assert admin.post(f"/api/v1/runs/{run['id']}/metrics", json={"points": points}).is_success
    checkpoint = admin.post(
        f"/api/v1/runs/{run['id']}/checkpoints",
        json={
            "step": 1,
            "uri": f"{SHARED_BUCKET}/runs/{run['id']}/{MARKER}-c1",
            "digest": DIGEST,
            "size_bytes": 1,
        },
    ).json()
    version = admin.post(
        "/api/v1/datasets/versions",
        json={
            "project": MARKER,
            "name": f"{MARKER}-data",
            "uri": f"{SHARED_BUCKET}/{MARKER}/d",
            "digest": DIGEST,
        },
    ).json()
    assert admin.post(
        f"/api/v1/runs/{run['id']}/inputs", json={"dataset_version_id": version["id"]}
    ).is_success
    assert admin.post(
        "/api/v1/evals",
        json={"checkpoint_id": checkpoint["id"], "suite": f"{MARKER}-suite", "scores": {"acc": 1}},
    ).is_success
    artifact = admin.post(
        "/api/v1/artifacts",
        json={
            "project": MARKER,
            "kind": "model",
            "name": f"{MARKER}-model",
            "uri": f"{SHARED_BUCKET}/{MARKER}/m",
            "digest": DIGEST,
            "size_bytes": 1,
            "sources": [{"type": "checkpoint", "id": checkpoint["id"]}],
        },
    ).json()
    token = admin.post(
        "/api/v1/tokens", json={"name": f"{MARKER}-token", "project": MARKER, "role": "admin"}
    ).json()
    deployment = admin.put(
        f"/api/v1/deployments/kubernetes/{MARKER}/{DEPLOYMENT}",
        json={
            "checkpoint": {"run": f"{MARKER}-run"},
            "replicas": 1,
            "ready_replicas": 1,
            "phase": "Ready",
        },
    ).json()
    swept = admin.post(
        "/api/v1/sweeps", json={"project": MARKER, "manifest": sweep(f"{MARKER}-sweep")}
    ).json()
    return {
        "project": int(project["id"]),  # type: ignore[call-overload]
        "sweep": swept["id"],
        "run": run["id"],
        "experiment": run["experiment_id"],
        "checkpoint": checkpoint["id"],
        "version": version["id"],
        "dataset": version["dataset_id"],
        "artifact": artifact["id"],
        "token": token["id"],
        "deployment": deployment["id"],
    }
