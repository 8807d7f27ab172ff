"""A Sweep applied with kubectl: the operator registers it with the control plane, whose
workers start its first trial as a TrainingRun in the Sweep's namespace, the Sweep's status
follows the control plane's sweep, and deleting it cancels the sweep. kwok's pods run no
container, so the trials never end here; how a sweep ends is tests/sweeps/'s."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

pytestmark = [pytest.mark.k8s, pytest.mark.postgres, pytest.mark.redis]


def grid_sweep(name: str) -> dict[str, Any]:
    """Two trials, one at a time, no early stopping: the first stays Running on kwok."""
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": {
            "method": "grid",
            "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"trials": 2, "concurrency": 1},
            "parameters": {"config.train.lr": {"values": [0.003, 0.0003]}},
            "run": {
                "experiment": "ops",
                "image": "registry.invalid/train:1",
                "gpusPerNode": 1,  # the test cluster's nodes take GPU pods only
                "config": {
                    "model": {"preset": "tiny"},
                    "task": {"digits": 1},
                    "train": {"mode": "sft", "steps": 50},
                },
            },
        },
    }


def test_a_sweep_applied_with_kubectl_is_registered_and_runs_its_first_trial(
    stack: Stack, ns: str
) -> None:
    h.apply(grid_sweep("lr"), namespace=ns)

    def shown() -> dict[str, Any]:
        status: dict[str, Any] = h.kubectl_json("get", "sweep", "lr", namespace=ns).get("status")
        return status or {}

    def running() -> dict[str, Any] | None:
        status = shown()
        return status if status.get("phase") == "Running" and status.get("sweepId") else None

    status = stack.wait_for("the Sweep Running with its sweep id", running, seconds=60)
    uid = h.kubectl_json("get", "sweep", "lr", namespace=ns)["metadata"]["uid"]
    sweep = stack.get(f"/sweeps/{status['sweepId']}")
    assert (sweep["name"], sweep["backend"], sweep["k8s_uid"]) == ("lr", "kubernetes", uid)

    # The workers start trial 0 as a run of the kubernetes backend: its TrainingRun appears
    # next to the Sweep, with the trial's point applied to its config.
    stack.wait_for(
        "trial 0's TrainingRun",
        lambda: h.kubectl("get", "tr", "lr-000", "-o", "name", namespace=ns, check=False),
        seconds=60,
    )
    trial = h.kubectl_json("get", "tr", "lr-000", namespace=ns)
    assert trial["spec"]["config"]["train"]["lr"] == 0.003
    started = stack.wait_for(
        "the Sweep's status to count the trial",
        lambda: shown().get("trialsStarted"),
        seconds=30,
    )
    assert started == 1  # concurrency 1: trial 1 waits for trial 0 to end
    assert h.kubectl("get", "tr", "lr-001", namespace=ns, check=False) == ""

    h.kubectl("delete", "sweep", "lr", "--wait=true", "--timeout=60s", namespace=ns)
    assert stack.get(f"/sweeps/{status['sweepId']}")["phase"] == "Cancelled"
