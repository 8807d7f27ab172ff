"""A project's Kubernetes runs live in its own namespace: a manifest naming another
project's namespace, or one no project owns, is refused at submit with the field named, and
two projects' runs of the same name are two Kubernetes objects."""

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_project, make_token, training_run


def submit_k8s(client: TestClient, token: str, project: str, manifest: dict[str, object]):  # type: ignore[no-untyped-def]
    return client.post(
        "/api/v1/runs",
        json={"project": project, "manifest": manifest, "backend": "kubernetes"},
        headers=bearer(token),
    )


def test_a_kubernetes_run_lands_in_its_projects_namespace_and_no_other(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin, "alpha")
    make_project(admin, "beta")
    with TestClient(app) as client:
        alpha_editor = make_token(admin, "alpha", "editor")
        beta_editor = make_token(admin, "beta", "editor")

        for foreign in ("beta", "kube-system"):
            manifest = training_run(name="sneaky")
            manifest["metadata"] = {"name": "sneaky", "namespace": foreign}
            refused = submit_k8s(client, alpha_editor, "alpha", manifest)
            assert refused.status_code == 422, refused.text
            (error,) = refused.json()["detail"]
            assert error["loc"] == ["body", "manifest", "metadata", "namespace"], error
            assert foreign in error["msg"] and "'alpha'" in error["msg"], error
        # Nothing half-made: no run, no experiment in alpha.
        assert admin.get("/api/v1/runs", params={"project": "alpha"}).json()["items"] == []

        # Its own namespace, named or not, is accepted; beta's run of the same name is
        # another object, in beta's namespace.
        named = training_run(name="same")
        named["metadata"] = {"name": "same", "namespace": "alpha"}
        mine = submit_k8s(client, alpha_editor, "alpha", named)
        theirs = submit_k8s(client, beta_editor, "beta", training_run(name="same"))
        assert (mine.status_code, theirs.status_code) == (201, 201), (mine.text, theirs.text)
        objects = {(r.json()["k8s_namespace"], r.json()["name"]) for r in (mine, theirs)}
        assert objects == {("alpha", "same"), ("beta", "same")}
