"""Storage URIs stay inside their project (issue 57, defects 2 and 3): a checkpoint, dataset
or artifact URI is refused unless it lies in the project's storage (or, for datasets and
artifacts, in shared storage under a root), and retention and recovery check a stored row
again before they delete or read its files, since a row stored before may name anything."""

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from crucible.artifacts.digest import content_of
from crucible.db.engine import transaction
from crucible.db.tables import Checkpoint, Run, RunEvent
from crucible.settings import Settings
from crucible.workers.sweeps import promote_recovering, retire_checkpoints
from tests.api.test_checkpoints_datasets import API, submit_kind
from tests.conftest import SHARED_BUCKET, bearer, make_project, make_token
from tests.workers.test_handlers import drain, end_badly, run_of, running


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def write_checkpoint(folder: Path, content: str) -> dict[str, Any]:
    """Files in `folder`, and the fields that register them."""
    folder.mkdir(parents=True)
    (folder / "state").write_text(content)
    found = content_of(folder)
    return {"uri": folder.as_uri(), "digest": found.digest, "size_bytes": found.size_bytes}


def run_folder(settings: Settings, run_id: int) -> Path:
    """Where the local executor has a run write its checkpoints."""
    return settings.home / "runs" / str(run_id) / "checkpoints"


def insert_checkpoint(app: FastAPI, run_id: int, step: int, uri: str, **fields: Any) -> int:
    """A row as one registered before URIs were checked: straight into the database."""
    with transaction(app.state.session_factory) as session:
        row = Checkpoint(
            run_id=run_id,
            step=step,
            uri=uri,
            digest=fields.get("digest", digest(uri)),
            size_bytes=fields.get("size_bytes", 1),
        )
        session.add(row)
        session.flush()
        return row.id


def events_text(admin: TestClient, run_id: int) -> str:
    return str(admin.get(f"{API}/runs/{run_id}/events").json())


@pytest.fixture
def two(admin: TestClient, settings: Settings) -> dict[str, Any]:
    """Projects alpha and beta, an editor of each, and a beta run with a checkpoint in the
    folder the platform gave it."""
    ids = {name: make_project(admin, name)["id"] for name in ("alpha", "beta")}
    alpha = bearer(make_token(admin, "alpha", "editor"))
    beta = bearer(make_token(admin, "beta", "editor"))
    beta_run = submit_kind(admin, "TrainingRun", "b-sft", project="beta")
    fields = write_checkpoint(run_folder(settings, beta_run["id"]) / "step-1", "beta's weights")
    registered = admin.post(
        f"{API}/runs/{beta_run['id']}/checkpoints", json={"step": 1, **fields}, headers=beta
    )
    assert registered.status_code == 201, registered.text
    return {
        "ids": ids,
        "alpha": alpha,
        "beta": beta,
        "beta_run": beta_run,
        "beta_checkpoint": registered.json(),
        "beta_folder": run_folder(settings, beta_run["id"]) / "step-1",
    }


def assert_refused(response: Any, uri: str) -> str:
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "uri"] and error["input"] == uri, error
    message: str = error["msg"]
    return message


def test_an_editor_cannot_register_another_projects_checkpoint_or_any_folder(
    admin: TestClient, settings: Settings, two: dict[str, Any], tmp_path: Path
) -> None:
    run = submit_kind(admin, "TrainingRun", "a-sft", project="alpha")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("x")
    link = run_folder(settings, run["id"]) / "step-3"
    link.parent.mkdir(parents=True)
    link.symlink_to(two["beta_folder"])
    for uri in [
        two["beta_folder"].as_uri(),
        str(two["beta_folder"]),  # a plain path is a file:// URI
        victim.as_uri(),
        settings.home.as_uri(),
        (settings.home / "runs" / str(run["id"])).as_uri(),  # the run's whole folder
        link.as_uri(),  # a link in its own folder to beta's
    ]:
        refused = admin.post(
            f"{API}/runs/{run['id']}/checkpoints",
            json={"step": 1, "uri": uri, "digest": digest(uri), "size_bytes": 1},
            headers=two["alpha"],
        )
        assert_refused(refused, uri)
    assert admin.get(f"{API}/runs/{run['id']}/checkpoints").json()["items"] == []
    own = write_checkpoint(run_folder(settings, run["id"]) / "step-2", "alpha's weights")
    accepted = admin.post(
        f"{API}/runs/{run['id']}/checkpoints", json={"step": 2, **own}, headers=two["alpha"]
    )
    assert accepted.status_code == 201, accepted.text


def test_retention_never_deletes_files_outside_the_runs_project(
    admin: TestClient, app: FastAPI, settings: Settings, two: dict[str, Any], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("x")
    run = submit_kind(admin, "TrainingRun", "a-sft", project="alpha", checkpoints={"keepLast": 1})
    running(admin, run["id"])
    stolen = insert_checkpoint(app, run["id"], 1, two["beta_folder"].as_uri())
    anywhere = insert_checkpoint(app, run["id"], 2, victim.as_uri())
    # A run submitted before storage was checked, whose spec named any folder as its storage.
    beside = victim / "runs" / str(run["id"]) / "step-0"
    beside.mkdir(parents=True)
    with transaction(app.state.session_factory) as session:
        old = session.get_one(Run, run["id"])
        spec = old.manifest["spec"]
        old.manifest = old.manifest | {
            "spec": spec | {"checkpoints": spec["checkpoints"] | {"storage": victim.as_uri()}}
        }
    in_old_storage = insert_checkpoint(app, run["id"], 0, beside.as_uri())
    own = write_checkpoint(run_folder(settings, run["id"]) / "step-3", "alpha's step 3")
    newest = write_checkpoint(run_folder(settings, run["id"]) / "step-4", "alpha's step 4")
    for step, fields in [(3, own), (4, newest)]:
        response = admin.post(
            f"{API}/runs/{run['id']}/checkpoints",
            json={"step": step, **fields},
            headers=two["alpha"],
        )
        assert response.status_code == 201, response.text
    drain(app)  # their evals triggered (none configured), then retention runs

    retire_checkpoints(app.state.session_factory)
    live = admin.get(f"{API}/runs/{run['id']}/checkpoints").json()["items"]
    assert [c["step"] for c in live if c["deleted_at"] is None] == [4]
    assert not (run_folder(settings, run["id"]) / "step-3").exists()  # its own: deleted
    assert (two["beta_folder"] / "state").read_text() == "beta's weights"
    assert (victim / "precious").exists() and beside.exists()
    beta = admin.get(f"{API}/checkpoints/{two['beta_checkpoint']['id']}").json()
    assert beta["deleted_at"] is None
    kept = [
        e for e in admin.get(f"{API}/runs/{run['id']}/events").json() if e["data"].get("files_kept")
    ]
    assert {e["data"]["checkpoint_id"] for e in kept} == {stolen, anywhere, in_old_storage}
    assert all("left in place" in e["message"] for e in kept)


@pytest.fixture
def counting_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that counts every request it gets."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_recovery_reads_nothing_outside_the_project_and_fetches_no_address(
    admin: TestClient,
    app: FastAPI,
    settings: Settings,
    two: dict[str, Any],
    counting_server: tuple[str, list[str]],
) -> None:
    base, hits = counting_server
    passwd = Path("/etc/passwd")
    secret = content_of(passwd)
    run = submit_kind(
        admin, "TrainingRun", "a-sft", project="alpha", recovery={"backoffSeconds": 0}
    )
    first = running(admin, run["id"])
    # Its true size, a wrong digest: read, it would put the file's own digest in an event.
    insert_checkpoint(
        app, run["id"], 1, passwd.as_uri(), size_bytes=secret.size_bytes, digest=digest("no")
    )
    insert_checkpoint(app, run["id"], 2, f"{base}/ckpt", size_bytes=2)
    insert_checkpoint(app, run["id"], 3, two["beta_folder"].as_uri(), size_bytes=14)

    end_badly(admin, run["id"], first, "Preempted", 143)
    drain(app)
    promote_recovering(app.state.session_factory)

    assert run_of(admin, run["id"])["resume_checkpoint_id"] is None  # from scratch
    text = events_text(admin, run["id"])
    assert secret.digest not in text and str(secret.size_bytes) not in text
    assert "its files were not read" in text
    with transaction(app.state.session_factory) as session:
        reasons = session.scalars(
            select(RunEvent.reason).where(
                RunEvent.run_id == run["id"], RunEvent.type == "CheckpointDamaged"
            )
        ).all()
    assert reasons == ["OutsideProjectStorage"] * 3
    assert hits == []
    # Nor at submit: a checkpoint storage at an address is refused before anyone asks it.
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "at-an-address"},
        "spec": {"experiment": "exp", "checkpoints": {"storage": f"{base}/ckpt"}},
    }
    submitted = admin.post(
        f"{API}/runs", json={"project": "alpha", "manifest": manifest}, headers=two["alpha"]
    )
    assert submitted.status_code == 422, submitted.text
    assert submitted.json()["detail"][0]["loc"] == [
        "body",
        "manifest",
        "spec",
        "checkpoints",
        "storage",
    ]
    assert hits == []


@pytest.mark.parametrize(
    "uri",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://169.254.169.254/latest/meta-data/",
        "gs://bucket/data",
        "memory://data",
    ],
)
def test_a_dataset_version_at_an_address_is_refused(
    admin: TestClient, two: dict[str, Any], uri: str
) -> None:
    body = {"project": "alpha", "name": "d", "uri": uri, "digest": digest(uri)}
    refused = admin.post(f"{API}/datasets/versions", json=body, headers=two["alpha"])
    assert "file:///" in assert_refused(refused, uri)
    artifact = {
        "project": "alpha",
        "kind": "model",
        "name": "m",
        "uri": uri,
        "digest": digest(uri),
        "size_bytes": 1,
        "sources": [],
    }
    assert_refused(admin.post(f"{API}/artifacts", json=artifact, headers=two["alpha"]), uri)


def test_s3_uris_outside_the_projects_prefix_are_refused(
    admin: TestClient, two: dict[str, Any]
) -> None:
    alpha_id, beta_id = two["ids"]["alpha"], two["ids"]["beta"]
    run = submit_kind(admin, "TrainingRun", "a-sft", project="alpha")

    def checkpoint(step: int, uri: str) -> Any:
        body = {"step": step, "uri": uri, "digest": digest(uri), "size_bytes": 1}
        return admin.post(f"{API}/runs/{run['id']}/checkpoints", json=body, headers=two["alpha"])

    def dataset(uri: str) -> Any:
        body = {"project": "alpha", "name": "d", "uri": uri, "digest": digest(uri)}
        return admin.post(f"{API}/datasets/versions", json=body, headers=two["alpha"])

    beta_prefix = f"{SHARED_BUCKET}/projects/{beta_id}/ckpt"
    beta_run = f"{SHARED_BUCKET}/runs/{two['beta_run']['id']}/checkpoints/step-1"
    for step, uri in enumerate(
        [beta_prefix, beta_run, "s3://another-bucket/x", f"{SHARED_BUCKET}/shared/ckpt"], 1
    ):
        assert_refused(checkpoint(step, uri), uri)
    for uri in [beta_prefix, beta_run, "s3://another-bucket/x", f"{SHARED_BUCKET}-x/d"]:
        assert_refused(dataset(uri), uri)
    message = assert_refused(
        checkpoint(9, f"{SHARED_BUCKET}/shared/ckpt2"), f"{SHARED_BUCKET}/shared/ckpt2"
    )
    assert f"{SHARED_BUCKET}/projects/{alpha_id}/" in message
    assert checkpoint(10, f"{SHARED_BUCKET}/projects/{alpha_id}/ckpt").status_code == 201
    assert checkpoint(11, f"{SHARED_BUCKET}/runs/{run['id']}/checkpoints/s").status_code == 201
    assert dataset(f"{SHARED_BUCKET}/shared/d").status_code == 201
    # A checkpoint storage in another project's prefix is refused at submit.
    manifest = {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "into-beta"},
        "spec": {
            "experiment": "exp",
            "checkpoints": {"storage": f"{SHARED_BUCKET}/projects/{beta_id}"},
        },
    }
    submitted = admin.post(
        f"{API}/runs", json={"project": "alpha", "manifest": manifest}, headers=two["alpha"]
    )
    assert submitted.status_code == 422, submitted.text


def test_a_bad_eval_checkpoint_tag_does_not_stop_retention_for_other_projects(
    admin: TestClient, app: FastAPI, settings: Settings, two: dict[str, Any]
) -> None:
    waiting = submit_kind(admin, "EvalJob", "ev", project="beta")
    with transaction(app.state.session_factory) as session:
        session.get_one(Run, waiting["id"]).tags = {"crucible.dev/checkpoint": "x"}
    run = submit_kind(admin, "TrainingRun", "a-sft", project="alpha", checkpoints={"keepLast": 1})
    for step in (1, 2):
        fields = write_checkpoint(run_folder(settings, run["id"]) / f"step-{step}", f"a{step}")
        response = admin.post(
            f"{API}/runs/{run['id']}/checkpoints",
            json={"step": step, **fields},
            headers=two["alpha"],
        )
        assert response.status_code == 201, response.text
    drain(app)

    retire_checkpoints(app.state.session_factory)
    assert not (run_folder(settings, run["id"]) / "step-1").exists()
    assert (run_folder(settings, run["id"]) / "step-2").exists()
    assert run_of(admin, waiting["id"])["phase"] == "Pending"


def test_another_projects_eval_tag_does_not_pin_a_checkpoint(
    admin: TestClient, app: FastAPI, settings: Settings, two: dict[str, Any]
) -> None:
    run = submit_kind(
        admin, "TrainingRun", "a-pinned", project="alpha", checkpoints={"keepLast": 1}
    )
    waiting = submit_kind(admin, "EvalJob", "ev-pin", project="beta")
    for step in (1, 2):
        fields = write_checkpoint(run_folder(settings, run["id"]) / f"step-{step}", f"p{step}")
        response = admin.post(
            f"{API}/runs/{run['id']}/checkpoints",
            json={"step": step, **fields},
            headers=two["alpha"],
        )
        assert response.status_code == 201, response.text
        if step == 1:
            # A waiting eval run of beta naming alpha's first checkpoint: a row from before
            # the tag was the platform's only (the API refuses it now).
            with transaction(app.state.session_factory) as session:
                tags = {"crucible.dev/checkpoint": str(response.json()["id"])}
                session.get_one(Run, waiting["id"]).tags = tags
    drain(app)

    retire_checkpoints(app.state.session_factory)
    assert not (run_folder(settings, run["id"]) / "step-1").exists()
    assert (run_folder(settings, run["id"]) / "step-2").exists()
    assert run_of(admin, waiting["id"])["phase"] == "Pending"
