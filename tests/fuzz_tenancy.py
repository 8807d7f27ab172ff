"""The world the fuzz tests attack: two projects, A and B, each with one of everything and
an admin, an editor and a viewer token; and the three checks every fuzz batch ends with.

- no 5xx (and no request slower than `SLOW_SECONDS`): checked per request by the caller;
- nothing of B changed: `b_changes`, comparing B's rows before and after a batch;
- a viewer wrote nothing: `viewer_changes`, comparing every row before and after.

B's rows are found from the schema rather than listed by hand, so a new table joins the
check the day it is added: a row is B's when it is B's project, or it points by a foreign
key at a row of B (a row of A that links to B's checkpoint counts as B's, which is the point),
or it is an outbox message whose payload names one.
"""

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.api.app import create_app
from crucible.db.tables import Base
from crucible.settings import load_settings
from tests.api.test_tenancy import every_row
from tests.conftest import ADMIN_TOKEN, bearer, make_project, make_token, training_run
from tests.route_examples import DIGEST, sweep

A = "alpha"
B = "zzbeta"
ROLES = ("viewer", "editor", "admin")
SLOW_SECONDS = 5.0
"""A request slower than this, alone on an idle SQLite database, is a finding: it is how one
caller freezes the server for everyone (issue 57's LIKE pattern and grid sweeps)."""

# Tables a read may legitimately write to, with why; none today. The failed-authentication
# throttle counts in memory (no broker in tests), and tokens keep no last-used time.
READ_WRITES: dict[str, str] = {}

Snapshot = dict[str, list[dict[str, Any]]]


def secret(project: str) -> str:
    """A text kept in the project's rows (its description, a metric key, an eval suite, an
    MLflow tag) that no fuzzed request ever sends: in an answer to another project's caller,
    it can only have come from this project's rows."""
    return f"{project}-secret"


@dataclass
class Seeded:
    """One project's rows, by kind: what generated ids and names are aimed at."""

    name: str
    ids: dict[str, list[int]] = field(default_factory=dict)
    folders: list[Path] = field(default_factory=list)
    """Where its files are: its runs' folders and its own prefix, under the home."""

    def first(self, kind: str) -> int:
        return self.ids[kind][0]

    def files(self) -> dict[str, str]:
        """Each of its files, by path, with its contents' digest."""
        return {
            f"{folder}/{path}": digest
            for folder in self.folders
            for path, digest in files(folder).items()
        }


def seed_project(admin: TestClient, name: str, home: Path) -> Seeded:
    """A project with an experiment, two runs (one with an attempt, metrics, a checkpoint
    and an input), a dataset version, an eval, an artifact, a sweep and a deployment. Files
    are named where the platform lets the project keep them, under the home: checkpoints
    in their run's folder, datasets and artifacts under the project's prefix."""
    seeded = Seeded(name)
    project = int(str(make_project(admin, name)["id"]))
    described = admin.patch(f"/api/v1/projects/{project}", json={"description": secret(name)})
    assert described.is_success, described.text
    seeded.ids["project"] = [project]
    own = f"{home.absolute().as_uri()}/projects/{project}"
    runs = []
    for run_name in (f"{name}-run", f"{name}-run-2"):
        response = admin.post(
            "/api/v1/runs",
            json={
                "project": name,
                "manifest": training_run(name=run_name, experiment=f"{name}-exp"),
            },
        )
        assert response.status_code == 201, response.text
        runs.append(response.json())
    run = runs[0]["id"]
    seeded.ids["run"] = [r["id"] for r in runs]
    # Real files behind the URIs registered below, so that a request that deletes or
    # rewrites another project's files shows as a change to them.
    seeded.folders = [
        home / "projects" / str(project),
        *(home / "runs" / str(r["id"]) for r in runs),
    ]
    for path in ("runs/{run}/c1/model.pt", "projects/{project}/d/part-0", "projects/{project}/m"):
        stored = home / path.format(run=run, project=project)
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_bytes(secret(name).encode())
    seeded.ids["experiment"] = [runs[0]["experiment_id"]]
    assert admin.post(f"/api/v1/runs/{run}/attempts", json={}).status_code == 201
    points = [
        {"key": "loss", "step": 1, "value": 1.0},
        {"key": secret(name), "step": 1, "value": 1.0},
    ]
    assert admin.post(f"/api/v1/runs/{run}/metrics", json={"points": points}).is_success
    checkpoint = _created(
        admin.post(
            f"/api/v1/runs/{run}/checkpoints",
            json={
                "step": 1,
                "uri": f"{home.absolute().as_uri()}/runs/{run}/c1",
                "digest": DIGEST,
                "size_bytes": 1,
            },
        )
    )
    seeded.ids["checkpoint"] = [checkpoint["id"]]
    version = _created(
        admin.post(
            "/api/v1/datasets/versions",
            json={
                "project": name,
                "name": f"{name}-data",
                "uri": f"{own}/d",
                "digest": DIGEST,
            },
        )
    )
    seeded.ids["version"] = [version["id"]]
    seeded.ids["dataset"] = [version["dataset_id"]]
    assert admin.post(
        f"/api/v1/runs/{run}/inputs", json={"dataset_version_id": version["id"]}
    ).is_success
    assert admin.post(
        "/api/v1/evals",
        json={"checkpoint_id": checkpoint["id"], "suite": secret(name), "scores": {"acc": 1}},
    ).is_success
    artifact = _created(
        admin.post(
            "/api/v1/artifacts",
            json={
                "project": name,
                "kind": "model",
                "name": f"{name}-model",
                "uri": f"{own}/m",
                "digest": DIGEST,
                "size_bytes": 1,
                "sources": [{"type": "checkpoint", "id": checkpoint["id"]}],
            },
        )
    )
    seeded.ids["artifact"] = [artifact["id"]]
    swept = _created(
        admin.post("/api/v1/sweeps", json={"project": name, "manifest": sweep(f"{name}-sweep")})
    )
    seeded.ids["sweep"] = [swept["id"]]
    token = _created(
        admin.post(
            "/api/v1/tokens", json={"name": f"{name}-seeded", "project": name, "role": "admin"}
        )
    )
    seeded.ids["token"] = [token["id"]]
    deployment = admin.put(
        f"/api/v1/deployments/kubernetes/{name}/{name}-served",
        json={
            "checkpoint": {"run": f"{name}-run"},
            "replicas": 1,
            "ready_replicas": 1,
            "phase": "Ready",
        },
    )
    assert deployment.is_success, deployment.text
    seeded.ids["deployment"] = [deployment.json()["id"]]
    return seeded


def _created(response: Any) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


@dataclass
class World:
    """The app, its global admin, projects A and B as seeded, and A's token per role."""

    app: FastAPI
    admin: TestClient
    home: Path
    a: Seeded
    b: Seeded
    tokens: dict[str, str]

    def heal(self) -> None:
        """Put A back when a fuzzed admin deleted it or revoked its tokens, so the next
        operation is fuzzed as all three roles again. B is never touched here: a change to
        it is a finding, not something to repair."""
        if self.admin.get(f"/api/v1/projects/{self.a.first('project')}").status_code == 404:
            self.a = seed_project(self.admin, A, self.home)
            self.tokens = {}
        for role in ROLES:
            token = self.tokens.get(role)
            if token is None or self.admin_view(token).status_code == 401:
                self.tokens[role] = make_token(self.admin, A, role)

    def admin_view(self, token: str) -> Any:
        with TestClient(self.app, headers=bearer(token)) as client:
            return client.get("/api/v1/experiments", params={"project": A})

    def client(self, role: str) -> TestClient:
        """A client holding A's token of `role`, or the global admin's for "global"."""
        token = ADMIN_TOKEN if role == "global" else self.tokens[role]
        return TestClient(self.app, headers=bearer(token))


def build_world(home: Path) -> Iterator[World]:
    """A fresh app on SQLite under `home`, with A and B seeded; closed afterwards."""
    app = create_app(
        load_settings(
            home=home,
            database_url=f"sqlite:///{home / 'fuzz.db'}",
            admin_token=ADMIN_TOKEN,
            broker_url=None,
        )
    )
    with TestClient(app, headers=bearer(ADMIN_TOKEN)) as admin:
        b = seed_project(admin, B, home)
        a = seed_project(admin, A, home)
        tokens = {role: make_token(admin, A, role) for role in ROLES}
        yield World(app=app, admin=admin, home=home, a=a, b=b, tokens=tokens)
    app.state.engine.dispose()


def files(root: Path, under: Callable[[str], bool] = lambda _: True) -> dict[str, str]:
    """The files under `root` whose relative path `under` accepts, with their contents'
    digests. Walked with a stack: a fuzzed MLflow upload may nest folders deeper than
    Python's recursion limit."""
    found = {}
    folders = [str(root)] if root.exists() else []
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                    continue
                relative = os.path.relpath(entry.path, root)
                if under(relative):
                    found[relative] = hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
    return found


def snapshot(app: FastAPI) -> Snapshot:
    return every_row(app)


# Keys of the outbox's JSON payloads that name a row: a message about B's run is B's.
PAYLOAD_REFERENCES = {
    "project_id": "projects",
    "run_id": "runs",
    "checkpoint_id": "checkpoints",
    "experiment_id": "experiments",
    "sweep_id": "sweeps",
    "deployment_id": "deployments",
}


def rows_of(rows: Snapshot, project_id: int) -> Snapshot:
    """The rows of `rows` that are the project's, point at one of its rows by a foreign key,
    or (the outbox) name one in their payload."""
    owned: dict[str, set[Any]] = {"projects": {project_id}}
    mine: Snapshot = {}
    for table in Base.metadata.sorted_tables:
        links = [
            (fk.parent.name, fk.column.table.name)
            for fk in table.foreign_keys
            if fk.column.table.name in owned
        ]
        kept = [
            row
            for row in rows.get(table.name, [])
            if (table.name == "projects" and row["id"] == project_id)
            or any(row[column] in owned[parent] for column, parent in links)
        ]
        if table.name != "projects":
            owned[table.name] = {row.get("id") for row in kept}
        if kept:
            mine[table.name] = kept
    messages = [
        row
        for row in rows.get("outbox", [])
        if isinstance(row["payload"], dict)
        and any(
            row["payload"].get(key) in owned.get(table, set())
            for key, table in PAYLOAD_REFERENCES.items()
        )
    ]
    if messages:
        mine["outbox"] = messages
    return mine


def differences(
    before: Snapshot, after: Snapshot, *, ignore: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Per changed table, the rows gone or changed and the rows new or changed."""
    changed = {}
    for name in sorted(set(before) | set(after)):
        if name in ignore:
            continue
        old, new = before.get(name, []), after.get(name, [])
        if old != new:
            changed[name] = {
                "gone or changed": [r for r in old if r not in new][:3],
                "new or changed": [r for r in new if r not in old][:3],
            }
    return changed


def diff_keys(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str]]:
    """Which files went, came or changed between two `files` listings."""
    return {
        "gone": sorted(set(before) - set(after))[:5],
        "new": sorted(set(after) - set(before))[:5],
        "changed": sorted(k for k in set(before) & set(after) if before[k] != after[k])[:5],
    }


def b_changes(before: Snapshot, after: Snapshot, b_project: int) -> dict[str, Any]:
    return differences(rows_of(before, b_project), rows_of(after, b_project))


def viewer_changes(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    return differences(before, after, ignore=frozenset(READ_WRITES))
