"""The MLflow routes against inputs a client should never send but an attacker will: each
answers 4xx in MLflow's shape naming what was wrong, none 500s or stalls the server, and a
refused write leaves what was there (issue 57, defects 4, 9 and the reserved tags of 6)."""

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.api.app import create_app
from crucible.db.tables import Experiment, Project
from crucible.settings import Settings
from tests.conftest import ADMIN_TOKEN, bearer, make_project, make_token, submit
from tests.servers import app_in_thread, crucible

API = "/mlflow/api/2.0/mlflow"
ARTIFACTS = "/mlflow/api/2.0/mlflow-artifacts/artifacts"
STAMP = 1_760_000_000_000
BIG = "1" + "0" * 400  # 10^400 as a JSON number: Python reads it as an int no float holds


@pytest.fixture
def settings(settings: Settings, tmp_path: Path) -> Settings:
    """The artifact store of this test alone: ids start at 1 in every test's database, so a
    store shared by the session would mix the tests' files."""
    return settings.model_copy(update={"mlflow_artifact_root": (tmp_path / "mlflow").as_uri()})


@pytest.fixture
def tokens(admin: TestClient) -> dict[str, str]:
    make_project(admin, "vision")
    return {
        "editor": make_token(admin, "vision", "editor"),
        "viewer": make_token(admin, "vision", "viewer"),
    }


def call(client: TestClient, token: str, method: str, path: str, **kwargs: Any) -> Any:
    return client.request(method, f"{API}{path}", headers=bearer(token), **kwargs)


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def refused(
    response: Any, *named: str, status: int = 400, code: str = "INVALID_PARAMETER_VALUE"
) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == code, body
    message: str = body["message"]
    for word in named:
        assert word in message, message
    return message


def new_experiment(client: TestClient, token: str, name: str = "exp") -> str:
    created = ok(call(client, token, "POST", "/experiments/create", json={"name": name}))
    experiment_id: str = created["experiment_id"]
    return experiment_id


def new_run(client: TestClient, token: str, experiment_id: str, **fields: Any) -> str:
    body = {"experiment_id": experiment_id, **fields}
    run_id: str = ok(call(client, token, "POST", "/runs/create", json=body))["run"]["info"][
        "run_id"
    ]
    return run_id


# --- Defect 4: LIKE without backtracking, and bounded filters ---------------------------------


def _slow_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """What LIKE was before: fine as a reference on short texts, exponential on long ones."""
    body = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def test_like_agrees_with_sql_like_on_every_small_case() -> None:
    import itertools

    from crucible.mlflow_compat.filters import like_matcher

    texts = ["", "a", "b", "ab", "ba", "aab", "abab", "bab", "A", "aBa", "%", "_", "a\nb"]
    pieces = ["a", "b", "%", "_", "A"]
    for length in range(5):
        for chosen in itertools.product(pieces, repeat=length):
            pattern = "".join(chosen)
            for ignore_case in (False, True):
                matcher = like_matcher(pattern, ignore_case=ignore_case)
                reference = _slow_regex(pattern, ignore_case)
                for text in texts:
                    expected = reference.match(text) is not None
                    assert matcher(text) is expected, (pattern, text, ignore_case)


def test_like_with_many_percents_answers_at_once(
    client: TestClient, tokens: dict[str, str]
) -> None:
    """`%%%...%x` was `.*.*...x`: 10 `%` took seconds against one name, 20 froze the server."""
    editor, viewer = tokens["editor"], tokens["viewer"]
    experiment_id = new_experiment(client, editor, "a" * 63)
    for _ in range(3):
        run_id = new_run(client, editor, experiment_id, run_name="a" * 250)
        tags = [{"key": "note", "value": "a" * 1000}]
        ok(call(client, editor, "POST", "/runs/log-batch", json={"run_id": run_id, "tags": tags}))
    percents = "%" * 30
    started = time.monotonic()
    for comparator in ("LIKE", "ILIKE"):
        for clause in (
            f"tags.note {comparator} '{percents}x'",
            f"run_name {comparator} '{percents}x'",
        ):
            body = {"experiment_ids": [experiment_id], "filter": clause}
            assert ok(call(client, viewer, "POST", "/runs/search", json=body)).get("runs", []) == []
        found = call(
            client,
            viewer,
            "POST",
            "/experiments/search",
            json={"filter": f"name {comparator} '{percents}x'"},
        )
        assert ok(found)["experiments"] == []
    spread = "%a" * 15 + "%"  # matches: every piece found, none retried
    body = {"experiment_ids": [experiment_id], "filter": f"tags.note LIKE '{spread}'"}
    assert len(ok(call(client, viewer, "POST", "/runs/search", json=body))["runs"]) == 3
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (" AND ".join(["params.a = 'b'"] * 101), "100 clauses"),
        ("params.a = '" + "b" * 10_001 + "'", "10000"),
        ("params.a LIKE '" + "%b" * 300 + "'", "500"),
    ],
    ids=["clauses", "length", "like-pattern"],
)
def test_filters_have_bounds_that_name_themselves(
    client: TestClient, tokens: dict[str, str], bad: str, named: str
) -> None:
    experiment_id = new_experiment(client, tokens["editor"])
    response = call(
        client,
        tokens["viewer"],
        "POST",
        "/runs/search",
        json={"experiment_ids": [experiment_id], "filter": bad},
    )
    refused(response, named)


def test_a_search_of_too_many_experiments_names_the_bound(
    client: TestClient, tokens: dict[str, str]
) -> None:
    ids = [str(i) for i in range(1, 1002)]
    response = call(client, tokens["viewer"], "POST", "/runs/search", json={"experiment_ids": ids})
    refused(response, "experiment_ids", "1000")


# --- Defect 9: ordinary bad inputs answer 400, never 500 --------------------------------------


def _raw(client: TestClient, token: str, path: str, text: str) -> Any:
    """A body the JSON encoder would not write (10^400 as a number)."""
    headers = {**bearer(token), "Content-Type": "application/json"}
    return client.post(f"{API}{path}", content=text, headers=headers)


BAD_REQUESTS: list[tuple[str, str, str, str]] = [
    # (id, route, body with RUN/EXPERIMENT in place of the ids, the field the answer names)
    (
        "start-time-1e20",
        "/runs/create",
        '{"experiment_id": "EXPERIMENT", "start_time": 1e20}',
        "start_time",
    ),
    (
        "start-time-past-9999",
        "/runs/create",
        '{"experiment_id": "EXPERIMENT", "start_time": 9000000000000000}',
        "start_time",
    ),
    (
        "start-time-10e400",
        "/runs/create",
        '{"experiment_id": "EXPERIMENT", "start_time": BIG}',
        "start_time",
    ),
    (
        "run-name-2mb",
        "/runs/create",
        '{"experiment_id": "EXPERIMENT", "run_name": "HUGE"}',
        "Run name",
    ),
    (
        "run-name-escape",
        "/runs/create",
        '{"experiment_id": "EXPERIMENT", "run_name": "a\\u001b[2J"}',
        "run name",
    ),
    (
        "end-time-1e20",
        "/runs/update",
        '{"run_id": "RUN", "status": "FINISHED", "end_time": 1e20}',
        "end_time",
    ),
    (
        "value-10e400",
        "/runs/log-metric",
        '{"run_id": "RUN", "key": "loss", "value": BIG, "timestamp": NOW}',
        "value",
    ),
    (
        "value-1e400",
        "/runs/log-metric",
        '{"run_id": "RUN", "key": "loss", "value": 1e400, "timestamp": NOW}',
        "loss",
    ),
    (
        "timestamp-10e400",
        "/runs/log-metric",
        '{"run_id": "RUN", "key": "loss", "value": 1, "timestamp": BIG}',
        "timestamp",
    ),
    (
        "step-2e70",
        "/runs/log-metric",
        '{"run_id": "RUN", "key": "loss", "value": 1, "timestamp": NOW, "step": HUGE_STEP}',
        "step",
    ),
    (
        "batch-step-2e70",
        "/runs/log-batch",
        '{"run_id": "RUN", "metrics": [{"key": "loss", "value": 1, "timestamp": NOW, '
        '"step": HUGE_STEP}]}',
        "step",
    ),
    (
        "max-results-2e70",
        "/runs/search",
        '{"experiment_ids": ["EXPERIMENT"], "max_results": HUGE_STEP}',
        "max_results",
    ),
    (
        "model-step-text",
        "/runs/outputs",
        '{"run_id": "RUN", "models": [{"model_id": "MODEL", "step": "soon"}]}',
        "step",
    ),
    (
        "model-step-2e70",
        "/runs/outputs",
        '{"run_id": "RUN", "models": [{"model_id": "MODEL", "step": HUGE_STEP}]}',
        "step",
    ),
]


@pytest.mark.parametrize(
    ("route", "body", "named"), [b[1:] for b in BAD_REQUESTS], ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_numbers_and_names_answer_400_naming_the_field(
    client: TestClient, tokens: dict[str, str], route: str, body: str, named: str
) -> None:
    editor = tokens["editor"]
    experiment_id = new_experiment(client, editor)
    run_id = new_run(client, editor, experiment_id)
    model = call(client, editor, "POST", "/logged-models", json={"experiment_id": experiment_id})
    text = (
        body.replace("EXPERIMENT", experiment_id)
        .replace("MODEL", ok(model)["model"]["info"]["model_id"])
        .replace("RUN", run_id)
        .replace("HUGE_STEP", str(2**70))
        .replace("NOW", str(STAMP))
        .replace("BIG", BIG)
        .replace("HUGE", "r" * 2_000_000)
    )
    refused(_raw(client, editor, route, text), named)
    run = ok(call(client, editor, "GET", "/runs/get", params={"run_id": run_id}))["run"]
    assert run["data"]["metrics"] == [] and run["info"]["status"] == "RUNNING"


def test_a_body_nested_past_the_apis_limit_is_refused_before_it_is_read(
    client: TestClient, tokens: dict[str, str]
) -> None:
    # The API's own depth limit answers before the MLflow route parses anything (a
    # RecursionError and a 500 before either), in the API's shape, naming the limit.
    response = _raw(client, tokens["editor"], "/runs/log-batch", "[" * 100_000 + "]" * 100_000)
    assert response.status_code == 422, response.text
    assert "nested deeper than the limit" in response.text


def test_bulk_interval_steps_past_int64_answer_400(
    client: TestClient, tokens: dict[str, str]
) -> None:
    editor = tokens["editor"]
    run_id = new_run(client, editor, new_experiment(client, editor))
    params = {"run_ids": [run_id], "metric_key": "loss", "start_step": 2**70, "end_step": 2**71}
    refused(
        call(client, editor, "GET", "/metrics/get-history-bulk-interval", params=params),
        "start_step",
    )


@pytest.mark.parametrize(
    "name",
    ["a\x1b]0;owned\x07b", "nul\x00name", "../escape", "a/../b", "right\u202eleft"],
    ids=["escape", "nul", "dot-dot", "inner-dot-dot", "bidi"],
)
def test_experiment_names_with_controls_or_dot_dot_are_refused(
    client: TestClient, tokens: dict[str, str], name: str
) -> None:
    editor = tokens["editor"]
    refused(
        call(client, editor, "POST", "/experiments/create", json={"name": name}), "experiment name"
    )
    experiment_id = new_experiment(client, editor, "fine")
    renamed = call(
        client,
        editor,
        "POST",
        "/experiments/update",
        json={"experiment_id": experiment_id, "new_name": name},
    )
    refused(renamed, "experiment name")
    listed = ok(call(client, editor, "POST", "/experiments/search", json={}))["experiments"]
    assert [e["name"] for e in listed] == ["fine"]
    # Databricks-style paths stay valid names.
    new_experiment(client, editor, "/Users/me/exp")


def test_the_cli_prints_control_characters_escaped(
    app: FastAPI, tokens: dict[str, str], tmp_path: Path
) -> None:
    """A name stored before names were checked reaches `crucible experiments ls` as text."""
    with Session(app.state.engine) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        session.add(Experiment(project_id=project_id, name="x\x1b]0;owned\x07\x1b[2Jy"))
        session.commit()
    with app_in_thread(app) as url:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")},
            "CRUCIBLE_API_URL": url,
            "CRUCIBLE_TOKEN": tokens["viewer"],
            "CRUCIBLE_HOME": str(tmp_path / "cli-home"),
            "COLUMNS": "200",
        }
        listed = crucible(env, "experiments", "ls", "--project", "vision", timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "x\\x1b]0;owned\\x07\\x1b[2Jy" in listed.stdout


# --- Artifacts: bounded paths, folders and files, atomic uploads --------------------------------


def _put(client: TestClient, token: str, path: str, content: Any) -> Any:
    return client.put(f"{ARTIFACTS}/{path}", content=content, headers=bearer(token))


def test_artifact_paths_too_long_too_deep_or_through_a_file_answer_400(
    client: TestClient, tokens: dict[str, str]
) -> None:
    editor = tokens["editor"]
    experiment_id = new_experiment(client, editor)
    root = f"{experiment_id}/{new_run(client, editor, experiment_id)}/artifacts"
    refused(_put(client, editor, f"{root}/{'n' * 300}.txt", b"x"), "longer than 255 bytes")
    refused(_put(client, editor, f"{root}/{'d/' * 2000}f.txt", b"x"), "artifact path")
    refused(
        client.get(ARTIFACTS, params={"path": f"{root}/{'d/' * 2000}"}, headers=bearer(editor)),
        "artifact path",
    )
    ok(_put(client, editor, f"{root}/plots/a.txt", b"hello"))
    refused(_put(client, editor, f"{root}/plots/a.txt/b.txt", b"x"), "a file stands")
    refused(_put(client, editor, f"{root}/plots", b"x"), "is a folder")
    got = client.get(f"{ARTIFACTS}/{root}/plots/a.txt", headers=bearer(editor))
    assert got.status_code == 200 and got.content == b"hello"


@pytest.fixture
def small_bodies(settings: Settings) -> Iterator[TestClient]:
    application = create_app(settings.model_copy(update={"max_body_bytes": 1024}))
    with TestClient(application, headers=bearer(ADMIN_TOKEN)) as admin:
        yield admin
    application.state.engine.dispose()


def test_an_upload_refused_as_too_large_leaves_the_file_before_it(small_bodies: TestClient) -> None:
    admin = small_bodies
    make_project(admin, "vision")
    editor = make_token(admin, "vision", "editor")
    experiment_id = new_experiment(admin, editor)
    root = f"{experiment_id}/{new_run(admin, editor, experiment_id)}/artifacts"
    ok(_put(admin, editor, f"{root}/model.bin", b"good bytes"))

    def chunks() -> Iterator[bytes]:  # streamed: no Content-Length to refuse it up front
        for _ in range(8):
            yield b"x" * 512

    for name in ("model.bin", "other.bin"):
        assert _put(admin, editor, f"{root}/{name}", chunks()).status_code == 413
    got = admin.get(f"{ARTIFACTS}/{root}/model.bin", headers=bearer(editor))
    assert got.status_code == 200 and got.content == b"good bytes"
    listed = ok(admin.get(ARTIFACTS, params={"path": root}, headers=bearer(editor)))
    assert listed["files"] == [{"path": "model.bin", "is_dir": False, "file_size": 10}]
    missing = admin.get(f"{ARTIFACTS}/{root}/other.bin", headers=bearer(editor))
    refused(missing, status=404, code="RESOURCE_DOES_NOT_EXIST")


# --- Finished runs, the default experiment, reserved tags ---------------------------------------


def test_log_parameter_on_a_finished_crucible_run_is_refused(
    admin: TestClient, client: TestClient, tokens: dict[str, str]
) -> None:
    run = submit(admin, project="vision", name="sft-done")
    run_id = str(run["id"])
    assert admin.post(f"/api/v1/runs/{run_id}/cancel").status_code < 300
    before = admin.get(f"/api/v1/runs/{run_id}").json()
    assert before["phase"] == "Cancelled"
    param = {"run_id": run_id, "key": "lr", "value": "0.5"}
    refused(
        call(client, tokens["editor"], "POST", "/runs/log-parameter", json=param),
        "lr",
        code="INVALID_STATE",
    )
    batch = {"run_id": run_id, "params": [{"key": "lr", "value": "0.5"}]}
    refused(
        call(client, tokens["editor"], "POST", "/runs/log-batch", json=batch),
        "lr",
        code="INVALID_STATE",
    )
    after = admin.get(f"/api/v1/runs/{run_id}").json()
    assert after["manifest"] == before["manifest"]
    assert after["spec_digest"] == before["spec_digest"]
    # A run an MLflow client made and ended is MLflow's: it still takes new params.
    editor = tokens["editor"]
    mlflow_run = new_run(client, editor, new_experiment(client, editor, "by-mlflow"))
    ok(
        call(
            client,
            editor,
            "POST",
            "/runs/update",
            json={"run_id": mlflow_run, "status": "FINISHED"},
        )
    )
    ok(call(client, editor, "POST", "/runs/log-parameter", json={**param, "run_id": mlflow_run}))


def test_a_viewers_reads_do_not_create_the_default_experiment(
    admin: TestClient, client: TestClient, tokens: dict[str, str]
) -> None:
    viewer = tokens["viewer"]
    refused(
        call(client, viewer, "GET", "/experiments/get", params={"experiment_id": "0"}),
        status=404,
        code="RESOURCE_DOES_NOT_EXIST",
    )
    searched = ok(call(client, viewer, "POST", "/runs/search", json={"experiment_ids": ["0"]}))
    assert searched.get("runs", []) == []
    refused(
        call(
            client, viewer, "GET", "/experiments/get-by-name", params={"experiment_name": "Default"}
        ),
        status=404,
        code="RESOURCE_DOES_NOT_EXIST",
    )
    assert ok(call(client, viewer, "POST", "/experiments/search", json={}))["experiments"] == []
    listed = admin.get("/api/v1/experiments", params={"project": "vision"}).json()
    assert [e["name"] for e in listed["items"]] == []


def test_reserved_tags_are_refused_through_every_mlflow_route(
    admin: TestClient, client: TestClient, tokens: dict[str, str]
) -> None:
    editor = tokens["editor"]
    run_id = str(submit(admin, project="vision", name="sft-tags")["id"])
    reserved = {"key": "crucible.dev/checkpoint", "value": "x"}
    experiment_id = new_experiment(client, editor, "by-mlflow")
    for route, body in (
        ("/runs/set-tag", {"run_id": run_id, **reserved}),
        ("/runs/log-batch", {"run_id": run_id, "tags": [reserved]}),
        ("/runs/create", {"experiment_id": experiment_id, "tags": [reserved]}),
        ("/runs/delete-tag", {"run_id": run_id, "key": "crucible.dev/reproduces"}),
        ("/experiments/set-experiment-tag", {"experiment_id": experiment_id, **reserved}),
    ):
        refused(call(client, editor, "POST", route, json=body), "crucible.dev/")
    tags = admin.get(f"/api/v1/runs/{run_id}").json()["tags"]
    assert not any(key.startswith("crucible.dev/") for key in tags)
    searched = ok(
        call(client, editor, "POST", "/runs/search", json={"experiment_ids": [experiment_id]})
    )
    assert searched.get("runs", []) == []


def test_json_body_shapes_stay_mlflow_errors(client: TestClient, tokens: dict[str, str]) -> None:
    """Not a bad input of the issue's list, but the same class: a body that parses to a list."""
    refused(_raw(client, tokens["editor"], "/runs/create", json.dumps([1, 2])), "JSON object")


@pytest.mark.parametrize("digits", ["³", "¹²", "٣"])
def test_ids_of_digits_int_does_not_read_name_nothing(
    client: TestClient, tokens: dict[str, str], digits: str
) -> None:
    # str.isdigit() holds for these, int() refuses the first two and reads the third as 3:
    # each was a 500, or another entity's id.
    editor = tokens["editor"]
    experiment_id = new_experiment(client, editor)
    run_id = new_run(client, editor, experiment_id)
    assert run_id != digits
    missing = "RESOURCE_DOES_NOT_EXIST"
    refused(
        call(client, editor, "GET", "/runs/get", params={"run_id": digits}),
        status=404,
        code=missing,
    )
    refused(
        call(client, editor, "GET", "/experiments/get", params={"experiment_id": digits}),
        status=404,
        code=missing,
    )
    upload = client.put(
        f"{ARTIFACTS}/{digits}/{digits}/artifacts/f.txt", content=b"x", headers=bearer(editor)
    )
    assert upload.status_code in (400, 403, 404), upload.text
