"""Cluster reports: a backend replaces its picture of nodes and pods; the cluster page and a
run's pods read it back, each token seeing only its own projects' runs."""

from fastapi.testclient import TestClient

from tests.conftest import bearer, make_project, make_token, submit, training_run


def _kube_run(admin: TestClient, project: str, name: str, uid: str) -> int:
    response = admin.post(
        "/api/v1/runs",
        json={
            "project": project,
            "manifest": training_run(name=name),
            "backend": "kubernetes",
            "k8s_uid": uid,
        },
    )
    assert response.status_code == 201, response.text
    run_id: int = response.json()["id"]
    return run_id


def _node(name: str, allocated: int, ready: bool = True) -> dict[str, object]:
    return {
        "name": name,
        "ready": ready,
        "gpus_allocatable": 8,
        "gpus_allocated": allocated,
        "gpu_product": "NVIDIA-H200",
    }


def _pod(uid: str, name: str, node: str, rank: int = 0) -> dict[str, object]:
    return {
        "run_uid": uid,
        "attempt": 1,
        "rank": rank,
        "name": name,
        "namespace": "team-a",
        "phase": "Running",
        "node": node,
        "gpus": 4,
    }


def test_report_replaces_the_previous_one_and_resolves_runs_by_uid(admin: TestClient) -> None:
    make_project(admin, "alpha")
    run_id = _kube_run(admin, "alpha", "sft", "uid-sft")
    first = {
        "nodes": [_node("gpu-1", 8), _node("gpu-2", 0)],
        "pods": [
            _pod("uid-sft", "sft-a1-0", "gpu-1"),
            _pod("uid-sft", "sft-a1-1", "gpu-1", rank=1),
            _pod("uid-not-registered-yet", "other-a1-0", "gpu-2"),
        ],
    }
    answer = admin.put("/api/v1/clusters/kubernetes/report", json=first)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"cluster": "kubernetes", "nodes": 2, "pods": 2, "unknown_runs": 1}

    pods = admin.get(f"/api/v1/runs/{run_id}/pods").json()
    assert [(p["name"], p["rank"], p["node"], p["gpus"]) for p in pods] == [
        ("sft-a1-0", 0, "gpu-1", 4),
        ("sft-a1-1", 1, "gpu-1", 4),
    ]
    view = admin.get("/api/v1/cluster").json()
    (cluster,) = view["clusters"]
    assert (cluster["name"], cluster["gpus_allocatable"], cluster["gpus_allocated"]) == (
        "kubernetes",
        16,
        8,
    )
    assert [n["name"] for n in cluster["nodes"]] == ["gpu-1", "gpu-2"]

    # The next report has one node left and the run's pods gone: nothing of the first stays.
    second = {"nodes": [_node("gpu-2", 0, ready=False)], "pods": []}
    assert admin.put("/api/v1/clusters/kubernetes/report", json=second).status_code == 200
    assert admin.get(f"/api/v1/runs/{run_id}/pods").json() == []
    (cluster,) = admin.get("/api/v1/cluster").json()["clusters"]
    assert [(n["name"], n["ready"]) for n in cluster["nodes"]] == [("gpu-2", False)]


def test_backends_report_separately(admin: TestClient) -> None:
    make_project(admin, "alpha")
    run_id = int(str(submit(admin, project="alpha", name="local-run")["id"]))
    local = {
        "nodes": [_node("laptop", 1) | {"gpus_allocatable": 1, "gpu_product": ""}],
        "pods": [
            {
                "run_id": run_id,
                "attempt": 1,
                "name": "local-run-a1",
                "phase": "Running",
                "node": "laptop",
                "gpus": 1,
                "gpu_devices": "0",
                "pid": 4242,
            }
        ],
    }
    assert admin.put("/api/v1/clusters/local/report", json=local).json()["pods"] == 1
    kube = {"nodes": [_node("gpu-1", 0)], "pods": []}
    assert admin.put("/api/v1/clusters/kubernetes/report", json=kube).status_code == 200
    names = [c["name"] for c in admin.get("/api/v1/cluster").json()["clusters"]]
    assert names == ["kubernetes", "local"]
    (pod,) = admin.get(f"/api/v1/runs/{run_id}/pods").json()
    assert (pod["cluster"], pod["gpu_devices"], pod["pid"]) == ("local", "0", 4242)


def test_only_a_global_admin_reports_and_tokens_see_only_their_runs(
    client: TestClient, admin: TestClient
) -> None:
    make_project(admin, "alpha")
    make_project(admin, "beta")
    alpha_run = _kube_run(admin, "alpha", "a", "uid-a")
    beta_run = _kube_run(admin, "beta", "b", "uid-b")
    alpha_admin = bearer(make_token(admin, "alpha", "admin"))
    report = {
        "nodes": [_node("gpu-1", 8)],
        "pods": [_pod("uid-a", "a-a1-0", "gpu-1"), _pod("uid-b", "b-a1-0", "gpu-1")],
    }
    refused = client.put("/api/v1/clusters/kubernetes/report", json=report, headers=alpha_admin)
    assert refused.status_code == 403
    assert admin.put("/api/v1/clusters/kubernetes/report", json=report).status_code == 200

    assert client.get(f"/api/v1/runs/{beta_run}/pods", headers=alpha_admin).status_code == 404
    assert len(client.get(f"/api/v1/runs/{alpha_run}/pods", headers=alpha_admin).json()) == 1
    # Both runs are still Pending (nothing moved them): each token sees only its own waiting.
    waiting = client.get("/api/v1/cluster", headers=alpha_admin).json()["waiting"]
    assert [w["name"] for w in waiting] == ["a"]
    assert {w["name"] for w in admin.get("/api/v1/cluster").json()["waiting"]} == {"a", "b"}


def test_bad_reports_are_refused_with_the_field_named(admin: TestClient) -> None:
    bad_name = admin.put("/api/v1/clusters/Not_A_Name/report", json={"nodes": [], "pods": []})
    assert bad_name.status_code == 422
    assert bad_name.json()["detail"][0]["loc"] == ["path", "cluster_name"]
    negative = {"nodes": [_node("gpu-1", -1)], "pods": []}
    answer = admin.put("/api/v1/clusters/kubernetes/report", json=negative)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "nodes", 0, "gpus_allocated"]
    assert admin.get("/api/v1/cluster").json()["clusters"] == []


def test_a_node_reported_twice_is_a_422_naming_it_not_a_conflict(admin: TestClient) -> None:
    twice = {"nodes": [_node("gpu-1", 0), _node("gpu-1", 1)], "pods": []}
    answer = admin.put("/api/v1/clusters/kubernetes/report", json=twice)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "nodes"] and "'gpu-1' is reported twice" in error["msg"]
    assert admin.get("/api/v1/cluster").json()["clusters"] == []
