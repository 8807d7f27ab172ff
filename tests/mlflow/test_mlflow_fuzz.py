"""A hand-written fuzz of the MLflow routes (left out of the OpenAPI schema, so schemathesis
never sees them), as each of project A's three roles: hostile values (huge and non-finite
numbers, numbers as strings, long strings, control characters, deep or escaping paths, wrong
types) in the main calls' fields. No 5xx, no request held for seconds; nothing of project B
changes, in the database or among its artifact files, and nothing of it shows in A's answers;
a viewer changes no row and no file.

Each case starts as a valid call on real experiments and runs of A or B (MLflow's and
Crucible's own, and "0", the default experiment) with up to two fields made hostile or left
out, so that cases reach the code behind the lookups and writes aimed at B are well formed.
"""

import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import bearer, make_token
from tests.fuzz_tenancy import (
    ROLES,
    SLOW_SECONDS,
    B,
    World,
    b_changes,
    build_world,
    files,
    secret,
    snapshot,
    viewer_changes,
)

API = "/mlflow/api/2.0/mlflow"
ARTIFACTS = "/mlflow/api/2.0/mlflow-artifacts/artifacts"
EXAMPLES = 12
"""Cases per call and role: 26 calls, so a role's pass is about 310 requests."""

NASTY_TEXT = [
    "",
    " ",
    "../../etc/passwd",
    "a/../../b",
    "nul\x00byte",
    "\x1b[2J\x1b[31mred",
    "line\r\nbreak",
    "'",
    '"',
    "\\",
    "é☃𝄞",
    "0",
    "-1",
    "9" * 40,
    "%" * 40 + "x",
]
NASTY_NUMBERS: list[Any] = [
    10**400,
    -(10**400),
    2**63,
    2**70,
    -(2**63) - 1,
    1e20,
    1e308,
    float("inf"),
    float("nan"),
    "inf",
    "-Infinity",
    "NaN",
    "1e400",
    "9" * 400,
]
wrong_type = st.one_of(
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
# Up to issue 57's 2 MB run name in bodies; a URL carries at most 64 kB (httpx's limit).
short_hostile_text = st.one_of(
    st.text(max_size=30), st.sampled_from(NASTY_TEXT), st.just("x" * 300), st.just("x" * 6_000)
)
hostile_text = st.one_of(short_hostile_text, st.just("x" * 2_000_000))
hostile_number = st.one_of(st.integers(), st.floats(), st.sampled_from(NASTY_NUMBERS))
anything = st.one_of(hostile_text, hostile_number, wrong_type)
key_values = st.one_of(
    st.lists(st.fixed_dictionaries({"key": hostile_text, "value": anything}), max_size=4),
    wrong_type,
)
FILTERS = [
    "name LIKE '%a%'",
    "name ILIKE '" + "%" * 40 + "x'",
    "attributes.run_name LIKE '" + "_%" * 40 + "x'",
    "metrics.loss > 1e400",
    "metrics.loss < -inf",
    "params.lr = '" + "x" * 6_000 + "'",
    "tags.`a.b` != 'c'",
    " AND ".join(["name = 'x'"] * 500),
    "attributes.start_time > 99999999999999999999999",
    "name IN ('a', 'b'",
]
# Ids that look like numbers to one reader and not to another: `str.isdigit` is true for
# superscripts, which `int` refuses; `int` takes spaces and underscores, MLflow does not.
NASTY_IDS = ["³", "¹²", "٣", " 1", "1_0", "+1", "-1", "0x1", "1e3", "01", "9" * 30, "0"]
hostile_id = st.one_of(st.sampled_from(NASTY_IDS), anything)
filters = st.one_of(st.sampled_from(FILTERS), hostile_text, wrong_type)
DEEP = "/".join(["d"] * 2_000) + "/f.txt"
ARTIFACT_TAILS = [
    "model.txt",
    "a/b/c.txt",
    "x" * 300,
    DEEP,
    "model.txt/inside-a-file",
    "..",
    "../../../../etc/passwd",
    "a\x01b",
    "%2e%2e/x",
    "",
]


@dataclass(frozen=True)
class Ids:
    """Real MLflow ids of A and B, as strings."""

    experiments: list[str]
    runs: list[str]
    models: list[str]  # logged models, `m-` and 32 hex digits
    run_folders: list[str]  # `<experiment>/<run>/artifacts`, the artifact paths of runs


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    params: dict[str, Any] | None = None
    content: bytes | None = None


Field = tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]
"""A field's valid values and its hostile ones."""


@st.composite
def spoiled(draw: st.DrawFn, fields: dict[str, Field]) -> dict[str, Any]:
    """A valid set of fields with up to two of them hostile or left out: most cases are then
    wrong in one or two ways, and some are valid, so writes reach the rows they name."""
    body = {name: draw(valid) for name, (valid, _) in fields.items()}
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True)):
        if draw(st.integers(0, 4)) == 0:
            del body[name]
        else:
            body[name] = draw(fields[name][1])
    return body


def calls(ids: Ids) -> dict[str, st.SearchStrategy[Request]]:
    """A strategy of requests per call fuzzed."""
    now = int(time.time() * 1000)
    word = st.text(alphabet="abcdefghij-_.", min_size=1, max_size=12)
    name: Field = (word, hostile_text)
    query_name: Field = (word, short_hostile_text)
    value: Field = (word, anything)
    experiment: Field = (st.sampled_from(ids.experiments), hostile_id)
    run: Field = (st.sampled_from(ids.runs), hostile_id)
    short_id = st.one_of(st.sampled_from(NASTY_IDS), short_hostile_text, hostile_number, wrong_type)
    query_experiment: Field = (st.sampled_from(ids.experiments), short_id)
    query_run: Field = (st.sampled_from(ids.runs), short_id)
    timestamp: Field = (st.integers(now - 10**9, now), hostile_number)
    step: Field = (st.integers(0, 1000), hostile_number)
    pairs = st.lists(st.fixed_dictionaries({"key": word, "value": word}), max_size=3)
    key_values_field: Field = (pairs, key_values)
    metric = st.fixed_dictionaries(
        {
            "key": word,
            "value": st.floats(allow_nan=False, allow_infinity=False),
            "timestamp": timestamp[0],
            "step": step[0],
        }
    )
    bad_metric = st.fixed_dictionaries(
        {"key": hostile_text, "value": hostile_number},
        optional={"timestamp": hostile_number, "step": hostile_number},
    )
    filter_field: Field = (st.sampled_from(["", "name LIKE '%a%'"]), filters)
    folder = st.sampled_from(ids.run_folders)
    good_path = st.tuples(folder, st.sampled_from(["model.txt", "new.txt", "d/e.txt"]))
    bad_path = st.one_of(
        st.tuples(folder, st.sampled_from(ARTIFACT_TAILS)).map("/".join),
        st.sampled_from(NASTY_IDS).map(lambda bad: f"{bad}/{bad}/artifacts/f.txt"),
        st.tuples(folder, st.text(max_size=20)).map("/".join),
        short_hostile_text,
    )
    artifact_path = st.one_of(good_path.map("/".join), bad_path)
    model = st.one_of(st.sampled_from(ids.models), short_hostile_text, st.sampled_from(NASTY_IDS))

    def post(path: str, fields: dict[str, Field]) -> st.SearchStrategy[Request]:
        return spoiled(fields).map(lambda body: Request("POST", API + path, content=_json(body)))

    def get(path: str, fields: dict[str, Field]) -> st.SearchStrategy[Request]:
        # Fields of a GET travel in the URL: short text only.
        return spoiled(fields).map(
            lambda query: Request("GET", API + path, params=_as_query(query))
        )

    return {
        "experiments/create": post("/experiments/create", {"name": name, "tags": key_values_field}),
        "experiments/get": get("/experiments/get", {"experiment_id": query_experiment}),
        "experiments/get-by-name": get("/experiments/get-by-name", {"experiment_name": query_name}),
        "experiments/search": post(
            "/experiments/search",
            {
                "filter": filter_field,
                "max_results": (st.integers(1, 100), hostile_number),
                "view_type": (st.sampled_from(["ACTIVE_ONLY", "ALL"]), anything),
            },
        ),
        "experiments/update": post(
            "/experiments/update", {"experiment_id": experiment, "new_name": name}
        ),
        "experiments/delete": post("/experiments/delete", {"experiment_id": experiment}),
        "experiments/set-experiment-tag": post(
            "/experiments/set-experiment-tag",
            {"experiment_id": experiment, "key": name, "value": value},
        ),
        "runs/create": post(
            "/runs/create",
            {
                "experiment_id": experiment,
                "run_name": name,
                "start_time": timestamp,
                "user_id": name,
                "tags": key_values_field,
            },
        ),
        "runs/get": get("/runs/get", {"run_id": query_run}),
        "runs/update": post(
            "/runs/update",
            {
                "run_id": run,
                "status": (st.sampled_from(["RUNNING", "FINISHED", "FAILED", "KILLED"]), anything),
                "end_time": timestamp,
                "run_name": name,
            },
        ),
        "runs/delete": post("/runs/delete", {"run_id": run}),
        "runs/log-metric": post(
            "/runs/log-metric",
            {
                "run_id": run,
                "key": name,
                "value": (st.floats(allow_nan=False, allow_infinity=False), hostile_number),
                "timestamp": timestamp,
                "step": step,
            },
        ),
        "runs/log-parameter": post(
            "/runs/log-parameter", {"run_id": run, "key": name, "value": value}
        ),
        "runs/set-tag": post("/runs/set-tag", {"run_id": run, "key": name, "value": value}),
        "runs/log-batch": post(
            "/runs/log-batch",
            {
                "run_id": run,
                "metrics": (
                    st.lists(metric, max_size=3),
                    st.one_of(st.lists(bad_metric, min_size=1, max_size=3), wrong_type),
                ),
                "params": key_values_field,
                "tags": key_values_field,
            },
        ),
        "runs/search": post(
            "/runs/search",
            {
                "experiment_ids": (
                    st.lists(experiment[0], min_size=1, max_size=3),
                    st.one_of(st.lists(anything, max_size=3), anything),
                ),
                "filter": filter_field,
                "max_results": (st.integers(1, 100), hostile_number),
                "order_by": (
                    st.just(["attributes.start_time DESC"]),
                    st.one_of(st.lists(hostile_text, max_size=3), anything),
                ),
                "run_view_type": (st.sampled_from(["ACTIVE_ONLY", "ALL"]), anything),
            },
        ),
        "metrics/get-history": get(
            "/metrics/get-history",
            {"run_id": query_run, "metric_key": (st.just("loss"), short_hostile_text)},
        ),
        "artifacts/list (tracking)": get(
            "/artifacts/list",
            {"run_id": query_run, "path": (st.just(""), st.sampled_from(ARTIFACT_TAILS))},
        ),
        "logged-models create": post(
            "/logged-models",
            {
                "experiment_id": experiment,
                "name": name,
                "source_run_id": run,
                "params": key_values_field,
                "tags": key_values_field,
            },
        ),
        "logged-models search": post(
            "/logged-models/search",
            {
                "experiment_ids": (
                    st.lists(experiment[0], min_size=1, max_size=3),
                    st.one_of(st.lists(anything, max_size=3), anything),
                ),
                "filter": filter_field,
                "max_results": (st.integers(1, 100), hostile_number),
            },
        ),
        "logged-models get": model.map(lambda m: Request("GET", f"{API}/logged-models/{quote(m)}")),
        "logged-models finalize": st.tuples(
            model,
            spoiled(
                {
                    "status": (
                        st.sampled_from(["LOGGED_MODEL_READY", "LOGGED_MODEL_FAILED"]),
                        anything,
                    )
                }
            ),
        ).map(
            lambda a: Request("PATCH", f"{API}/logged-models/{quote(a[0])}", content=_json(a[1]))
        ),
        "logged-models params": st.tuples(model, spoiled({"params": key_values_field})).map(
            lambda a: Request(
                "POST", f"{API}/logged-models/{quote(a[0])}/params", content=_json(a[1])
            )
        ),
        "artifacts upload": st.tuples(artifact_path, st.binary(max_size=64)).map(
            lambda a: Request("PUT", f"{ARTIFACTS}/{quote(a[0])}", content=a[1])
        ),
        "artifacts list": st.one_of(folder, bad_path).map(
            lambda path: Request("GET", ARTIFACTS, params={"path": path})
        ),
        "artifacts download": artifact_path.map(
            lambda path: Request("GET", f"{ARTIFACTS}/{quote(path)}")
        ),
    }


def _json(body: Any) -> bytes:
    """JSON as a hostile client may write it: NaN and Infinity bare, as Python's json does
    (httpx's own encoding refuses them)."""
    return json.dumps(body).encode()


def _as_query(fields: dict[str, Any]) -> dict[str, Any]:
    """A GET's fields as the query string can carry them: text, repeated for lists."""
    query: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, list):
            query[name] = [str(v) for v in value]
        elif value is not None:
            query[name] = str(value)
    return query


def shown(value: Any) -> Any:
    """`value` with long strings and numbers abbreviated, for a failure's one line."""
    if isinstance(value, dict):
        return {shown(k): shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown(v) for v in value]
    if isinstance(value, (str, bytes)) and len(value) > 100:
        return f"<{len(value)} chars: {value[:60]!r}...>"
    if isinstance(value, int) and abs(value) > 10**30:
        return f"<{len(str(value))}-digit int>"
    return value


@dataclass
class MlflowWorld:
    world: World
    ids: Ids
    b_experiments: set[str]
    artifact_root: Path

    def b_files(self) -> dict[str, str]:
        return files(self.artifact_root, lambda path: path.split("/")[0] in self.b_experiments)


def _seed(client: TestClient, token: str, project: str) -> tuple[str, str, str]:
    """An MLflow experiment of `project` with a run that has a metric, a param, a tag, an
    artifact file and a logged model; their ids."""
    headers = bearer(token)
    made = client.post(
        f"{API}/experiments/create", json={"name": f"{project}-mlflow"}, headers=headers
    )
    assert made.status_code == 200, made.text
    experiment = made.json()["experiment_id"]
    created = client.post(f"{API}/runs/create", json={"experiment_id": experiment}, headers=headers)
    assert created.status_code == 200, created.text
    run = created.json()["run"]["info"]["run_id"]
    batch = {
        "run_id": run,
        "metrics": [{"key": "loss", "value": 1.0, "timestamp": int(time.time() * 1000), "step": 1}],
        "params": [{"key": "lr", "value": "0.1"}],
        "tags": [{"key": "team", "value": secret(project)}],
    }
    logged = client.post(f"{API}/runs/log-batch", json=batch, headers=headers)
    assert logged.status_code == 200, logged.text
    path = f"{ARTIFACTS}/{experiment}/{run}/artifacts/model.txt"
    assert client.put(path, content=b"weights", headers=headers).status_code == 200
    model = client.post(
        f"{API}/logged-models",
        json={"experiment_id": experiment, "name": "m", "source_run_id": run},
        headers=headers,
    )
    assert model.status_code == 200, model.text
    return experiment, run, model.json()["model"]["info"]["model_id"]


def remove_tree(root: Path) -> None:
    """`shutil.rmtree` without recursion: it fails on folders nested 1,000 deep, and so
    would pytest's clean-up of its temporary folders, in every later session."""
    folders, stack = [], [str(root)]
    while stack:
        folder = stack.pop()
        folders.append(folder)
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    os.unlink(entry.path)
    for folder in reversed(folders):
        os.rmdir(folder)


@pytest.fixture
def mlflow_world() -> Iterator[MlflowWorld]:
    # Outside pytest's temporary folders, and removed here: see remove_tree.
    home = Path(tempfile.mkdtemp(prefix="crucible-mlflow-fuzz-"))
    try:
        yield from _mlflow_world(home)
    finally:
        remove_tree(home)


def _mlflow_world(home: Path) -> Iterator[MlflowWorld]:
    for world in build_world(home):
        experiments = ["0"]
        runs = []
        models = []
        folders = []
        b_experiments = set()
        for seeded in (world.a, world.b):
            token = make_token(world.admin, seeded.name, "editor")
            experiment, run, model = _seed(world.admin, token, seeded.name)
            models.append(model)
            pairs = [(experiment, run), (str(seeded.first("experiment")), str(seeded.first("run")))]
            experiments += [e for e, _ in pairs]
            runs += [r for _, r in pairs]
            folders += [f"{e}/{r}/artifacts" for e, r in pairs]
            if seeded.name == B:
                b_experiments |= {e for e, _ in pairs}
        ids = Ids(experiments=experiments, runs=runs, models=models, run_folders=folders)
        yield MlflowWorld(world, ids, b_experiments, home / "mlflow-artifacts")


def fuzz(client: TestClient, requests: Any, hidden: str) -> list[str]:
    """Each request must answer below 500 within SLOW_SECONDS, without the text `hidden` in
    its answer; the failures, as generated (one message each)."""

    @given(request=requests)
    @settings(
        max_examples=EXAMPLES,
        # No shrinking: a failure is reported as generated, so that a failing run still
        # ends in bounded time; the hostile values are few and named, so it reads as is.
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(request: Request) -> None:
        body = (
            json.loads(request.content or b"null")
            if request.method in ("POST", "PATCH")
            else request.content
        )
        where = f"{request.method} {shown(request.url)} body={shown(body)}"
        if request.params:
            where += f" query={shown(request.params)}"
        started = time.monotonic()
        try:
            response = client.request(
                request.method, request.url, params=request.params, content=request.content
            )
        except Exception as exc:  # the TestClient raises what the app raised: a 500
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        seconds = time.monotonic() - started
        assert response.status_code < 500, (
            f"{where} answered {response.status_code}: {response.text[:300]}"
        )
        assert seconds < SLOW_SECONDS, f"{where} took {seconds:.1f} s"
        assert hidden not in response.text, f"{where} showed B's data: {response.text[:300]}"

    try:
        call()
    except BaseExceptionGroup as group:
        return [str(e) for e in group.exceptions]
    except Exception as exc:  # every failure is reported; the other calls still run
        return [str(exc)]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("role", ROLES)
def test_mlflow_routes_as_each_role(mlflow_world: MlflowWorld, role: str) -> None:
    world = mlflow_world.world
    problems = []
    with world.client(role) as client:
        for name, requests in calls(mlflow_world.ids).items():
            label = f"MLflow {name} as A's {role}"
            before = snapshot(world.app)
            b_files = mlflow_world.b_files() | world.b.files()
            all_files = files(mlflow_world.artifact_root)
            problems += [f"{label}: {p}" for p in fuzz(client, requests, secret(B))]
            after = snapshot(world.app)
            if changed := b_changes(before, after, world.b.first("project")):
                problems.append(f"{label} changed project B's rows: {changed}")
            if mlflow_world.b_files() | world.b.files() != b_files:
                problems.append(f"{label} changed project B's artifact files")
            if role == "viewer":
                if changed := viewer_changes(before, after):
                    problems.append(f"{label} wrote rows: {changed}")
                if files(mlflow_world.artifact_root) != all_files:
                    problems.append(f"{label} wrote artifact files")
    assert not problems, "\n\n".join(problems)
