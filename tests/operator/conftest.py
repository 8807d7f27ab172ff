"""The operator's module-scoped stack (tests/k8s/operator_stack.py) on the local cluster, and
a fresh namespace per test, shared by the operator's cluster tests."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack

CRD_DIR = Path(__file__).resolve().parents[2] / "helm" / "crucible" / "crds"


@pytest.fixture(scope="module")
def stack(cluster: h.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
    for plural in ("trainingruns", "rolloutjobs", "evaljobs", "servedmodels", "sweeps"):
        h.kubectl("wait", "--for=condition=Established", f"crd/{plural}.crucible.dev")
    running = Stack(tmp_path_factory.mktemp("operator"), cluster.env())
    running.start()
    yield running
    running.stop()


@pytest.fixture
def ns(stack: Stack, namespace: str) -> Iterator[str]:
    """A fresh namespace whose crucible resources are deleted while the operator still runs
    (their finalizer needs it), so the namespace can go."""
    yield namespace
    h.kubectl("delete", "crucible", "--all", "--wait=false", namespace=namespace, check=False)
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
        and h.kubectl("get", "crucible", "-o", "name", namespace=namespace, check=False).strip()
    ):
        time.sleep(0.5)
