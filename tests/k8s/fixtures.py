"""pytest fixtures for tests against the local Kubernetes cluster (scripts/cluster), for
every folder (the operator's tests use them as the cluster's own do): tests/conftest.py
loads this module as a plugin.

* ``cluster`` (session): runs ``scripts/cluster up`` (which builds the binaries on first
  use and reuses a healthy running cluster), puts KUBECONFIG and the bin dir on PATH in
  ``os.environ`` for the session and returns a :class:`cluster_helpers.Cluster`. If this
  session started the cluster, it stops it at the end unless ``CRUCIBLE_CLUSTER_KEEP=1``.
  A cluster that cannot come up fails the tests (never skips them).
* ``namespace`` (function): a fresh namespace per test, deleted afterwards.

Every test module using them sets ``pytestmark = pytest.mark.k8s``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.k8s import cluster_helpers as h
from tests.k8s.real_node import load_workload_image


@pytest.fixture(scope="session")
def cluster() -> Iterator[h.Cluster]:
    was_running = h.cluster_command("env", timeout=60).returncode == 0
    error = None
    try:
        c = h.cluster_up()
    except Exception as exc:  # surface the script's own error
        error = exc
    if error is not None:
        pytest.fail(f"the local Kubernetes cluster could not come up: {error}", pytrace=False)
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "PATH")}
    os.environ["KUBECONFIG"] = c.kubeconfig
    os.environ["PATH"] = c.bin_dir + os.pathsep + os.environ.get("PATH", "")
    try:
        yield c
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if not was_running and os.environ.get("CRUCIBLE_CLUSTER_KEEP") != "1":
            h.cluster_command("down", timeout=120)


@pytest.fixture
def namespace(cluster: h.Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = h.create_namespace(request.node.name[:30])
    try:
        yield name
    finally:
        h.delete_namespace(name)


@pytest.fixture(scope="session")
def host_ip(cluster: h.Cluster) -> str:
    """Where the real node's pods reach this machine (its address on their bridge)."""
    if cluster.host_ip is None:
        pytest.fail("the cluster has no real node (started with CRUCIBLE_REAL_NODE=0?)")
    return cluster.host_ip


@pytest.fixture(scope="session")
def workload_image(cluster: h.Cluster) -> str:
    """The workload image of this tree, in the real node's containerd."""
    return load_workload_image(cluster.env())
