"""Ordinary input at the edges of its type answers 422 naming the field, never 500 and never
a run that can never start: integers beyond 64 bits, NaN, naive or unconvertible
datetimes, tokens that expire before they are made, nulls for fields that cannot be
cleared. Each of these answered 500 (or 201, then 500 on every later read) before."""

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from crucible.api.limits import json_depth_over
from tests.conftest import make_project, submit, training_run

BIG = 2**70  # beyond 64 bits
Call = Callable[[TestClient], Response]


def run_with(name: str, **spec: Any) -> Call:
    return lambda admin: admin.post(
        "/api/v1/runs", json={"project": "edges", "manifest": training_run(name=name, **spec)}
    )


def raw_run(body: bytes) -> Call:
    return lambda admin: admin.post(
        "/api/v1/runs", content=body, headers={"content-type": "application/json"}
    )


def nested(levels: int) -> dict[str, Any]:
    """A map `levels` deep: {"a": {"a": ... 1}}."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return dict(value)


def raw(path: str, body: bytes) -> Call:
    return lambda admin: admin.post(
        path, content=body, headers={"content-type": "application/json"}
    )


DEEP_BODY = b'{"project":"edges","manifest":' + b"[" * 500 + b"]" * 500 + b"}"
SWEEP = {
    "apiVersion": "crucible.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "wide"},
    "spec": {
        "metric": {"name": "loss", "goal": "minimize"},
        "budget": {"trials": 1},
        "parameters": {f"config.options.k{i}": {"values": [1]} for i in range(33)},
        "run": {"experiment": "e"},
    },
}

NAN_CONFIG = (
    b'{"project":"edges","manifest":{"apiVersion":"crucible.dev/v1alpha1","kind":"TrainingRun",'
    b'"metadata":{"name":"nan"},"spec":{"experiment":"e","config":{"lr":NaN}}}}'
)
TOLERATION = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": BIG}

CASES: dict[str, tuple[Call, list[str | int], str]] = {
    # (request, where the error points, words of the message)
    "initFrom.id of 2^63": (
        run_with("a", initFrom={"id": 2**63}),
        ["spec", "initFrom", "id"],
        "less than or equal",
    ),
    "a dataset version of 20 digits": (
        run_with("b", inputs=[{"dataset": "ds1@99999999999999999999"}]),
        ["spec", "inputs", 0, "dataset"],
        "pattern",
    ),
    "an integer beyond 64 bits in config": (
        run_with("c", config={"train": {"steps": BIG}}),
        ["spec", "config"],
        "train.steps",
    ),
    "NaN in config": (raw_run(NAN_CONFIG), ["spec", "config"], "not a finite number"),
    "tolerationSeconds beyond 64 bits": (
        run_with("d", scheduling={"tolerations": [TOLERATION]}),
        ["tolerations", 0, "tolerationSeconds"],
        "less than or equal",
    ),
    "checkpoints.keepLast beyond 32 bits": (
        run_with("e", checkpoints={"keepLast": BIG}),
        ["checkpoints", "keepLast"],
        "less than or equal",
    ),
    "a naive expires_at": (
        lambda admin: admin.post(
            "/api/v1/tokens",
            json={"name": "t", "project": "edges", "expires_at": "2030-01-01T00:00:00"},
        ),
        ["body", "expires_at"],
        "timezone",
    ),
    "an expires_at in the past": (
        lambda admin: admin.post(
            "/api/v1/tokens",
            json={"name": "t", "project": "edges", "expires_at": "0001-01-01T00:00:00Z"},
        ),
        ["body", "expires_at"],
        "in the future",
    ),
    "a naive created_after": (
        lambda admin: admin.get("/api/v1/runs", params={"created_after": "2030-01-01T00:00:00"}),
        ["query", "created_after"],
        "timezone",
    ),
    "a created_before that leaves the calendar in UTC": (
        lambda admin: admin.get(
            "/api/v1/runs", params={"created_before": "0001-01-01T00:00:00+01:00"}
        ),
        ["query", "created_before"],
        "out of range",
    ),
    "an after_id beyond 64 bits": (
        lambda admin: admin.get("/api/v1/runs/1/events", params={"after_id": BIG}),
        ["query", "after_id"],
        "less than or equal",
    ),
    "an event feed after_id beyond 64 bits": (
        lambda admin: admin.get("/api/v1/events", params={"after_id": BIG}),
        ["query", "after_id"],
        "less than or equal",
    ),
    "a Last-Event-ID beyond 64 bits": (
        lambda admin: admin.get(
            "/api/v1/runs/1/events/stream", headers={"Last-Event-ID": "99999999999999999999"}
        ),
        ["header", "last-event-id"],
        "less than or equal",
    ),
    "a dataset version of 20 digits to resolve": (
        lambda admin: admin.get(
            "/api/v1/datasets/resolve",
            params={"project": "edges", "ref": "ds@99999999999999999999"},
        ),
        ["query", "ref"],
        "name@<version>",
    ),
    "a null project description": (
        lambda admin: admin.patch("/api/v1/projects/1", json={"description": None}),
        ["body", "description"],
        "cannot be null",
    ),
    "null experiment tags": (
        lambda admin: admin.patch("/api/v1/experiments/1", json={"tags": None}),
        ["body", "tags"],
        "cannot be null",
    ),
    "an empty tag key": (
        lambda admin: admin.post(
            "/api/v1/runs",
            json={"project": "edges", "manifest": training_run(name="f"), "tags": {"": "x"}},
        ),
        ["body", "tags", "", "[key]"],
        "at least 1 character",
    ),
    "a tag value of 2,000 characters": (
        lambda admin: admin.post(
            "/api/v1/runs",
            json={
                "project": "edges",
                "manifest": training_run(name="g"),
                "tags": {"k": "v" * 2000},
            },
        ),
        ["body", "tags", "k"],
        "at most 1024",
    ),
    "a bidirectional override in a description": (
        lambda admin: admin.patch("/api/v1/projects/1", json={"description": "safe\u202egnp.exe"}),
        ["body", "description"],
        "pattern",
    ),
    "a NUL in a metric key": (
        lambda admin: admin.post(
            "/api/v1/runs/1/metrics", json={"points": [{"key": "lo\x00ss", "step": 1, "value": 1}]}
        ),
        ["points", 0, "key"],
        "pattern",
    ),
    # A value nested hundreds deep passed validation, then every answer that echoed or
    # serialized it ran out of stack: 500.
    "a config nested 70 levels deep": (
        run_with("h", config=nested(70)),
        ["spec", "config"],
        "nested deeper than the limit of 64 levels",
    ),
    "a run body nested 500 levels deep": (
        raw("/api/v1/runs", DEEP_BODY),
        ["body"],
        "nested deeper than the limit of 100 levels",
    ),
    "a manifest check nested 500 levels deep": (
        raw("/api/v1/manifests/validate", DEEP_BODY),
        ["body"],
        "nested deeper than the limit of 100 levels",
    ),
    # Each eval suite is one more eval run for every checkpoint the run registers.
    "33 eval suites": (
        run_with("i", evals=[{"suite": f"suite{i}"} for i in range(33)]),
        ["spec", "evals"],
        "at most 32 items",
    ),
    "1,001 arguments": (
        run_with("j", args=["x"] * 1001),
        ["spec", "args"],
        "at most 1000 items",
    ),
    "a sweep of 33 parameters": (
        lambda admin: admin.post("/api/v1/sweeps", json={"project": "edges", "manifest": SWEEP}),
        ["spec", "parameters"],
        "at most 32 items",
    ),
    "a metric time of -1e20": (
        lambda admin: admin.post(
            "/api/v1/runs/1/metrics",
            json={"points": [{"key": "loss", "step": 1, "value": 1, "time": -1e20}]},
        ),
        ["points", 0, "time"],
        "greater than or equal",
    ),
}


@pytest.fixture
def edges(admin: TestClient) -> TestClient:
    make_project(admin, "edges")
    submit(admin, project="edges", name="seed")  # run 1, experiment 1
    return admin


@pytest.mark.parametrize("case", list(CASES))
def test_edge_input_is_a_422_naming_the_field(edges: TestClient, case: str) -> None:
    call, where, words = CASES[case]
    response = call(edges)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    loc = error["loc"]
    assert loc[-len(where) :] == where, error
    assert words in error["msg"], error
    # Nothing stored: only the seed run and its experiment exist.
    runs = edges.get("/api/v1/runs", params={"project": "edges"}).json()["items"]
    assert [r["name"] for r in runs] == ["seed"]


@pytest.mark.parametrize(
    ("body", "deeper_than_3"),
    [
        (b'{"a": [[[1]]]}', True),
        (b'{"a": [[1]], "b": {"c": [2]}}', False),
        (b'{"a": "[[[[[[", "b": "]]]]"}', False),  # brackets in strings are text
        (b'{"a": "x\\"[[[[\\\\", "b": ["]]]"]}', False),  # escaped quotes and backslashes
        (b'{"a\\\\": [[["\\"{{{{"]]]}', True),
        (b"[[[[", False),  # not JSON: the parser's to refuse
    ],
)
def test_a_bodys_depth_is_found_without_parsing_it(body: bytes, deeper_than_3: bool) -> None:
    assert json_depth_over(body, 3) is deeper_than_3
