"""Artifacts over the REST API: registered from a project's checkpoints and dataset versions
with their lineage, idempotent on (URI, digest), immutable, and scoped to the project."""

from fastapi.testclient import TestClient

from tests.api.test_checkpoints_datasets import (
    API,
    digest,
    register_checkpoint,
    register_dataset,
    submit_train,
)
from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token


def artifact_body(**fields: object) -> dict[str, object]:
    return {
        "project": "vision",
        "kind": "model",
        "name": "sft-final-hf",
        "uri": f"{SHARED_BUCKET}/models/sft-final-hf",
        "digest": digest("weights"),
        "size_bytes": 1234,
        **fields,
    }


def test_an_artifact_is_registered_with_its_sources_in_lineage(admin: TestClient) -> None:
    make_project(admin)
    run = submit_train(admin)
    checkpoint = register_checkpoint(admin, run["id"], 100)
    data = register_dataset(admin, "tokenizer-text")
    sources = [{"type": "checkpoint", "id": checkpoint["id"]}]
    sources.append({"type": "dataset_version", "id": data["id"]})
    response = admin.post(
        f"{API}/artifacts",
        json=artifact_body(sources=sources, produced_by_run_id=run["id"], meta={"format": "hf"}),
    )
    assert response.status_code == 201, response.text
    artifact = response.json()
    assert artifact["kind"] == "model" and artifact["meta"] == {"format": "hf"}
    assert artifact["sources"] == sources
    assert admin.get(f"{API}/artifacts/{artifact['id']}").json() == artifact

    graph = admin.get(
        f"{API}/lineage/artifact/{artifact['id']}", params={"direction": "upstream"}
    ).json()
    edges = {(e["source"]["type"], e["source"]["id"], e["relation"]) for e in graph["edges"]}
    assert ("checkpoint", checkpoint["id"], "derived") in edges
    assert ("dataset_version", data["id"], "derived") in edges
    assert ("run", run["id"], "produced") in edges
    root = next(n for n in graph["nodes"] if n["type"] == "artifact")
    assert root["label"] == "model sft-final-hf"


def test_the_same_uri_and_digest_is_one_artifact_and_other_content_conflicts(
    admin: TestClient,
) -> None:
    make_project(admin)
    first = admin.post(f"{API}/artifacts", json=artifact_body()).json()
    again = admin.post(f"{API}/artifacts", json=artifact_body())
    assert again.status_code == 201 and again.json()["id"] == first["id"]
    other = admin.post(f"{API}/artifacts", json=artifact_body(digest=digest("other weights")))
    assert other.status_code == 409
    assert "artifacts are immutable" in other.json()["detail"]
    listed = admin.get(f"{API}/artifacts", params={"project": "vision"}).json()["items"]
    assert [a["id"] for a in listed] == [first["id"]]


def test_sources_must_be_checkpoints_or_datasets_of_the_same_project(admin: TestClient) -> None:
    make_project(admin)
    make_project(admin, "audio")
    foreign_run = submit_train(admin, project="audio", name="gen")
    foreign_checkpoint = register_checkpoint(admin, foreign_run["id"], 5)
    foreign_data = register_dataset(admin, project="audio")
    for source in (
        {"type": "checkpoint", "id": foreign_checkpoint["id"]},
        {"type": "dataset_version", "id": foreign_data["id"]},
        {"type": "checkpoint", "id": 999_999},
    ):
        response = admin.post(f"{API}/artifacts", json=artifact_body(sources=[source]))
        assert response.status_code == 404, (source, response.text)
    run_source = admin.post(
        f"{API}/artifacts", json=artifact_body(sources=[{"type": "run", "id": foreign_run["id"]}])
    )
    assert run_source.status_code == 422
    assert "checkpoint or a dataset_version, not a run" in run_source.text
    assert (
        admin.post(
            f"{API}/artifacts", json=artifact_body(produced_by_run_id=foreign_run["id"])
        ).status_code
        == 404
    )
    assert admin.post(f"{API}/artifacts", json=artifact_body(kind="weights")).status_code == 422
    assert admin.get(f"{API}/artifacts", params={"project": "vision"}).json()["items"] == []


def test_artifacts_are_listed_by_kind_and_hidden_from_other_projects(admin: TestClient) -> None:
    make_project(admin)
    make_project(admin, "audio")
    model = admin.post(f"{API}/artifacts", json=artifact_body()).json()
    tokenizer = admin.post(
        f"{API}/artifacts",
        json=artifact_body(kind="tokenizer", name="bpe-4k", uri=f"{SHARED_BUCKET}/tok/bpe-4k"),
    ).json()
    everything = admin.get(f"{API}/artifacts", params={"project": "vision"}).json()["items"]
    assert [a["id"] for a in everything] == [tokenizer["id"], model["id"]]  # newest first
    tokenizers = admin.get(
        f"{API}/artifacts", params={"project": "vision", "kind": "tokenizer"}
    ).json()["items"]
    assert [a["id"] for a in tokenizers] == [tokenizer["id"]]

    outsider = bearer(make_token(admin, "audio", "editor"))
    assert admin.get(f"{API}/artifacts/{model['id']}", headers=outsider).status_code == 404
    listing = admin.get(f"{API}/artifacts", params={"project": "vision"}, headers=outsider)
    assert listing.status_code == 404
    viewer = bearer(make_token(admin, "vision", "viewer"))
    assert admin.get(f"{API}/artifacts/{model['id']}", headers=viewer).status_code == 200
    refused = admin.post(
        f"{API}/artifacts", json=artifact_body(uri=f"{SHARED_BUCKET}/models/other"), headers=viewer
    )
    assert refused.status_code == 403
