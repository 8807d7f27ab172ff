"""Hostile input: oversized bodies and batches, SQL metacharacters in filters and ids, and
storage URIs that climb out of their directory or the allowed roots. Each is refused with a
clear 4xx, or answered without effect; none reaches a 5xx or another project's data."""

from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer, make_project, submit

HOSTILE = [
    "' OR '1'='1",
    "'; DROP TABLE runs; --",
    '" OR ""="',
    "%",
    "_",
    "\\",
    'a"b',
    "1 UNION SELECT token_hash FROM api_tokens",
    "$.x",
    "\u0000",
    "../../etc/passwd",
]


@pytest.fixture
def small_body_app(settings: Settings) -> Iterator[FastAPI]:
    application = create_app(settings.model_copy(update={"max_body_bytes": 1024}))
    yield application
    application.state.engine.dispose()


def test_a_body_over_the_limit_gets_413_declared_or_streamed(small_body_app: FastAPI) -> None:
    big = b'{"name": "' + b"x" * 2000 + b'"}'
    with TestClient(small_body_app, headers=bearer(ADMIN_TOKEN)) as client:
        declared = client.post(
            "/api/v1/projects", content=big, headers={"Content-Type": "application/json"}
        )
        streamed = client.post(
            "/api/v1/projects",
            content=iter([big[:600], big[600:]]),  # chunked: no Content-Length to trust
            headers={"Content-Type": "application/json"},
        )
        assert client.get("/api/v1/projects").json()["items"] == []
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["detail"] == "request body larger than the limit of 1024 bytes"


def test_a_metric_batch_over_10000_points_gets_422_naming_the_field(admin: TestClient) -> None:
    make_project(admin, "vision")
    run_id = submit(admin)["id"]
    points = [{"key": "loss", "step": s, "value": 1.0} for s in range(10_001)]
    response = admin.post(f"/api/v1/runs/{run_id}/metrics", json={"points": points})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", "points"]
    assert admin.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["keys"] == []


def test_sql_metacharacters_in_filters_and_ids_are_inert(admin: TestClient) -> None:
    make_project(admin, "vision")
    make_project(admin, "other")
    run_id = submit(admin)["id"]
    submit(admin, project="other", name="secret-run")
    for hostile in HOSTILE:
        probe_filters_and_ids(admin, run_id, hostile)
    runs = admin.get("/api/v1/runs").json()["items"]
    assert sorted(r["name"] for r in runs) == ["secret-run", "sft-1"]


def probe_filters_and_ids(admin: TestClient, run_id: object, hostile: str) -> None:
    probes = [
        ("/api/v1/runs", {"project": hostile}),
        ("/api/v1/runs", {"tag": f"{hostile}=x"}),
        ("/api/v1/runs", {"tag": f"k={hostile}"}),
        ("/api/v1/runs", {"cursor": hostile}),
        ("/api/v1/runs", {"sort": hostile}),
        ("/api/v1/experiments", {"project": hostile}),
        ("/api/v1/datasets", {"project": hostile}),
        ("/api/v1/datasets/resolve", {"project": "vision", "ref": f"{hostile}@latest"}),
        ("/api/v1/datasets/resolve", {"project": "vision", "ref": f"d@{hostile}"}),
        (f"/api/v1/runs/{run_id}/metrics", {"keys": f"{hostile},loss"}),
        (f"/api/v1/runs/{run_id}/checkpoints/best", {"metric": hostile}),
        (f"/api/v1/runs/{quote(hostile, safe='')}", {}),
        (f"/api/v1/lineage/run/{quote(hostile, safe='')}", {}),
        ("/api/v1/run-summaries", {"ids": hostile}),
    ]
    for path, params in probes:
        response = admin.get(path, params=params)
        assert response.status_code in (200, 404, 422), (path, params, response.text)
        # A filter naming a project that does not exist must not widen to every project.
        if "project" in params or "tag" in params:
            assert "secret-run" not in response.text, (path, params)


ESCAPING_URIS = [
    "file:///data/../../etc/passwd",
    "file:///data/%2e%2e/%2e%2e/etc/shadow",
    "file:///data/%252e%252e/secrets",
    "s3://bucket/team/../other-team/ckpt",
    "../outside",
    "relative/path",
    "file://evil-host/share",
    "file:///data/ok\u0000.bin",
    "C:\\data\\ckpt",
]


def test_storage_uris_that_escape_their_directory_are_refused(admin: TestClient) -> None:
    make_project(admin, "vision")
    run_id = submit(admin)["id"]
    for uri in ESCAPING_URIS:
        refuse_escaping_uri(admin, run_id, uri)
    assert admin.get(f"/api/v1/runs/{run_id}/checkpoints").json()["items"] == []
    assert admin.get("/api/v1/datasets", params={"project": "vision"}).json()["items"] == []


def refuse_escaping_uri(admin: TestClient, run_id: object, uri: str) -> None:
    digest = "sha256:" + "a" * 64
    checkpoint = admin.post(
        f"/api/v1/runs/{run_id}/checkpoints",
        json={"step": 1, "uri": uri, "digest": digest, "size_bytes": 1},
    )
    dataset = admin.post(
        "/api/v1/datasets/versions",
        json={"project": "vision", "name": "d", "uri": uri, "digest": digest},
    )
    for response in (checkpoint, dataset):
        assert response.status_code == 422, (uri, response.text)
        error = response.json()["detail"][0]
        assert error["loc"] == ["body", "uri"]
        assert "storage URI" in error["msg"]


@pytest.fixture
def rooted(settings: Settings) -> Iterator[TestClient]:
    roots = ["s3://team-ckpt/", "file:///checkpoints"]
    application = create_app(settings.model_copy(update={"storage_roots": roots}))
    with TestClient(application, headers=bearer(ADMIN_TOKEN)) as client:
        yield client
    application.state.engine.dispose()


def test_with_storage_roots_only_uris_under_them_are_accepted(rooted: TestClient) -> None:
    make_project(rooted, "vision")
    run_id = submit(rooted)["id"]
    digest = "sha256:" + "b" * 64

    def register(step: int, uri: str) -> tuple[int, object]:
        body = {"step": step, "uri": uri, "digest": digest, "size_bytes": 1}
        response = rooted.post(f"/api/v1/runs/{run_id}/checkpoints", json=body)
        return response.status_code, response.json()

    # Checkpoints in the folder each root gives the run (retention deletes only there).
    assert register(1, f"s3://team-ckpt/runs/{run_id}/1")[0] == 201
    assert register(2, f"file:///checkpoints/runs/{run_id}/2")[0] == 201
    assert register(3, f"/checkpoints/runs/{run_id}/3")[0] == 201
    for step, outside in enumerate(
        ["s3://team-ckpt-other/x", "s3://elsewhere/x", "file:///checkpointsX/y", "/etc/x"], 4
    ):
        status, body = register(step, outside)
        assert status == 422, (outside, body)
        error = body["detail"][0]  # type: ignore[index]
        assert error["loc"] == ["body", "uri"]
        assert "outside the allowed storage roots" in error["msg"]
    dataset = rooted.post(
        "/api/v1/datasets/versions",
        json={"project": "vision", "name": "d", "uri": "s3://public/d", "digest": digest},
    )
    assert dataset.status_code == 422 and dataset.json()["detail"][0]["loc"] == ["body", "uri"]
