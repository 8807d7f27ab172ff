"""Each run's pods on Kubernetes use a token of the run's own: minted by the operator, scoped
to the run's project, in a Secret the run's resource owns, and revoked (its Secret deleted)
when the run ends, when its resource is deleted, and by an operator that restarts after the
run ended without it. The stack's processes as a deployment runs them
(tests/k8s/operator_stack.py), on the local cluster."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from crucible_operator import naming
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack
from tests.operator.test_operator import (
    api_run,
    finish_all,
    training_run,
    wait_phase,
    wait_running_pods,
)

pytestmark = [pytest.mark.k8s, pytest.mark.postgres, pytest.mark.redis]


def token_ref(pod: dict[str, Any]) -> dict[str, str]:
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    ref: dict[str, str] = env["CRUCIBLE_TOKEN"]["valueFrom"]["secretKeyRef"]
    return ref


def secret_token(namespace: str, name: str) -> str | None:
    """The token in the Secret (read as the cluster's admin), None when there is none."""
    found = h.kubectl("get", "secret", name, "-o", "json", namespace=namespace, check=False)
    if not found:
        return None
    secret = h.kubectl_json("get", "secret", name, namespace=namespace)
    return base64.b64decode(secret["data"]["token"]).decode()


def answers(stack: Stack, token: str, path: str) -> int:
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        response = client.get(f"/api/v1{path}", headers={"Authorization": f"Bearer {token}"})
        return response.status_code


def run_tokens(stack: Stack, run_id: int) -> list[dict[str, Any]]:
    tokens: list[dict[str, Any]] = stack.get("/tokens")["items"]
    return [t for t in tokens if t["name"] == naming.run_token_name(run_id)]


def wait_revoked(stack: Stack, namespace: str, run_id: int, token: str) -> None:
    stack.wait_for(
        f"run {run_id}'s token refused", lambda: answers(stack, token, f"/runs/{run_id}") == 401
    )
    tokens = run_tokens(stack, run_id)
    assert tokens and all(t["revoked_at"] for t in tokens), tokens
    stack.wait_for(
        "its Secret gone",
        lambda: secret_token(namespace, naming.run_token_secret(run_id)) is None,
    )


def test_a_runs_pods_use_its_own_project_token_revoked_when_it_ends(stack: Stack, ns: str) -> None:
    h.apply(training_run("own", gpusPerNode=1), namespace=ns)
    (pod,) = wait_running_pods(stack, ns, "own", 1, 1)
    run = api_run(stack, ns, "own")

    ref = token_ref(pod)
    assert ref == {"name": f"crucible-run-{run['id']}-token", "key": "token"}
    secret = h.kubectl_json("get", "secret", ref["name"], namespace=ns)
    assert secret["type"] == "Opaque" and set(secret["data"]) == {"token"}
    (owner,) = secret["metadata"]["ownerReferences"]  # deleted with the resource
    assert (owner["kind"], owner["name"]) == ("TrainingRun", "own")
    # No namespace-wide token: nothing but served models would use one.
    assert secret_token(ns, "crucible-workload-token") is None

    token = secret_token(ns, ref["name"])
    assert token is not None
    (entry,) = run_tokens(stack, run["id"])
    assert entry["role"] == "editor" and entry["expires_at"] and not entry["revoked_at"]
    assert token.startswith(entry["prefix"])
    # The run's project, as an editor: it reads its run; no global token lists the tokens.
    assert stack.get(f"/projects/{entry['project_id']}")["name"] == ns
    assert answers(stack, token, f"/runs/{run['id']}") == 200
    assert answers(stack, token, "/tokens") == 403

    finish_all(ns, [pod], 0)
    wait_phase(stack, ns, "own", "Succeeded")
    wait_revoked(stack, ns, run["id"], token)


def test_a_deleted_resource_and_a_restarted_operator_leave_no_live_token(
    stack: Stack, ns: str
) -> None:
    """The token of a run whose loop a restart interrupted (known then only by its name), and
    of a run whose resource is deleted before it ends."""
    h.apply(
        training_run("restarted", gpusPerNode=1),
        training_run("deleted", gpusPerNode=1),
        namespace=ns,
    )
    (restarted_pod,) = wait_running_pods(stack, ns, "restarted", 1, 1)
    wait_running_pods(stack, ns, "deleted", 1, 1)
    restarted, deleted = api_run(stack, ns, "restarted"), api_run(stack, ns, "deleted")
    tokens = {
        run["id"]: secret_token(ns, naming.run_token_secret(run["id"]))
        for run in (restarted, deleted)
    }
    assert all(tokens.values()), tokens
    assert token_ref(restarted_pod)["name"] == naming.run_token_secret(restarted["id"])

    stack.operator.kill()
    stack.operator.start()
    finish_all(ns, [restarted_pod], 0)
    wait_phase(stack, ns, "restarted", "Succeeded")
    wait_revoked(stack, ns, restarted["id"], str(tokens[restarted["id"]]))

    h.kubectl("delete", "tr", "deleted", "--wait=true", "--timeout=60s", namespace=ns)
    assert answers(stack, str(tokens[deleted["id"]]), f"/runs/{deleted['id']}") == 401
    tokens_left = run_tokens(stack, deleted["id"])
    assert tokens_left and all(t["revoked_at"] for t in tokens_left), tokens_left


def test_a_run_that_ended_while_no_operator_ran_has_its_token_revoked_at_start(
    stack: Stack, ns: str
) -> None:
    h.apply(training_run("orphan", gpusPerNode=1), namespace=ns)
    wait_running_pods(stack, ns, "orphan", 1, 1)
    run = api_run(stack, ns, "orphan")
    token = secret_token(ns, naming.run_token_secret(run["id"]))
    assert token is not None
    stack.operator.kill()
    try:
        # Gone behind the operator's back, and the run ended in the control plane.
        h.kubectl(
            "patch",
            "tr",
            "orphan",
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            namespace=ns,
        )
        h.kubectl("delete", "tr", "orphan", "--wait=true", namespace=ns)
        stack.post(f"/runs/{run['id']}/cancel")
        assert answers(stack, token, f"/runs/{run['id']}") == 200  # nobody revoked it yet
    finally:
        stack.operator.start()
    stack.wait_for(
        "the ended run's token refused",
        lambda: answers(stack, token, f"/runs/{run['id']}") == 401,
    )
