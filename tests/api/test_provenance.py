"""What ran, kept on each attempt: the image digest the kubelet resolved (from the pods the
operator reports, set once) and the packages the workload reported when it started."""

from fastapi.testclient import TestClient

from tests.conftest import make_project, submit, training_run

DIGEST = "crucible.local/workload@sha256:" + "ab" * 32
LATER = "crucible.local/workload@sha256:" + "cd" * 32


def _report(admin: TestClient, uid: str, attempt: int, image_id: str | None, rank: int = 0) -> None:
    pod = {
        "run_uid": uid,
        "attempt": attempt,
        "rank": rank,
        "name": f"sft-a{attempt}-{rank}",
        "phase": "Running",
        "image": "crucible.local/workload:dev",
        "image_id": image_id,
    }
    answer = admin.put("/api/v1/clusters/kubernetes/report", json={"nodes": [], "pods": [pod]})
    assert answer.status_code == 200, answer.text


def test_the_image_digest_a_pod_ran_stays_on_its_attempt(admin: TestClient) -> None:
    make_project(admin, "alpha")
    run = admin.post(
        "/api/v1/runs",
        json={
            "project": "alpha",
            "manifest": training_run(),
            "backend": "kubernetes",
            "k8s_uid": "uid-1",
        },
    ).json()
    assert admin.post(f"/api/v1/runs/{run['id']}/attempts", json={}).status_code == 201

    _report(admin, "uid-1", 1, None)  # pulling: no digest yet
    (attempt,) = admin.get(f"/api/v1/runs/{run['id']}/attempts").json()
    assert attempt["image_id"] is None
    _report(admin, "uid-1", 1, LATER, rank=1)  # only rank 0 speaks for the attempt
    _report(admin, "uid-1", 1, DIGEST)
    _report(admin, "uid-1", 1, LATER)  # the tag moved later: what ran stays
    admin.put("/api/v1/clusters/kubernetes/report", json={"nodes": [], "pods": []})
    (attempt,) = admin.get(f"/api/v1/runs/{run['id']}/attempts").json()
    assert (attempt["image"], attempt["image_id"]) == ("crucible.local/workload:dev", DIGEST)


def test_the_workload_reports_its_packages(admin: TestClient) -> None:
    make_project(admin, "alpha")
    run = submit(admin, "alpha")
    assert admin.post(f"/api/v1/runs/{run['id']}/attempts", json={}).status_code == 201
    path = f"/api/v1/runs/{run['id']}/attempts/1/environment"
    packages = {"python": "3.11.2", "crucible": "0.1.0", "torch": "2.9.1+cpu"}
    answer = admin.put(path, json={"packages": packages})
    assert answer.status_code == 200, answer.text
    assert answer.json()["packages"] == packages
    assert admin.put(path, json={"packages": packages}).status_code == 200  # a retry
    (attempt,) = admin.get(f"/api/v1/runs/{run['id']}/attempts").json()
    assert attempt["packages"] == packages

    bad = admin.put(path, json={"packages": {"torch": "2.9\u202e"}})
    assert bad.status_code == 422
    assert (
        admin.put(
            f"/api/v1/runs/{run['id']}/attempts/7/environment", json={"packages": packages}
        ).status_code
        == 404
    )


def test_submitted_code_gives_the_short_code_ref(admin: TestClient) -> None:
    make_project(admin, "alpha")
    code = {
        "directory": "/src/model",
        "packages": {"crucible": "0.1.0"},
        "git": {
            "commit": "a" * 40,
            "dirty": True,
            "diff_digest": "sha256:" + "0" * 64,
            "top": "/src",
        },
    }
    answer = admin.post(
        "/api/v1/runs", json={"project": "alpha", "manifest": training_run(), "code": code}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["code"] == {**code, "package": None}  # submitted without one
    assert answer.json()["code_ref"] == "a" * 12 + "-dirty"
    code["git"]["commit"] = "not-a-commit"  # type: ignore[index]
    refused = admin.post(
        "/api/v1/runs",
        json={"project": "alpha", "manifest": training_run(name="other"), "code": code},
    )
    assert refused.status_code == 422
    assert "commit" in refused.text
