"""Every route of the OpenAPI schema, every field of its example body and every query
parameter, at the edges of its type: null, integers one past 64 bits, a 100,000-character
string, control and bidirectional-override characters, naive and unconvertible datetimes,
empty and wrongly shaped containers. Whatever the value, the answer is 2xx or 4xx, never
5xx, and a 422 names the field it was given.

Deterministic (a fixed list of values, not a random search: tests/api/test_openapi_fuzz.py
does that) and fast. Routes come from the schema, so a new one is walked the day it is
added; one with a body fails until tests/route_examples.py has an example for it."""

import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.route_examples import concrete_path, example_bodies, project_b, query_for

BOUNDARY_VALUES: dict[str, Any] = {
    "null": None,
    "int64 max + 1": 2**63,
    "int64 min - 1": -(2**63) - 1,
    "a long string": "x" * 100_000,
    "control characters": "a\x00b\x1b\u202ec",
    "a naive datetime": "2030-01-01T00:00:00",
    "a datetime before year 1 in UTC": "0001-01-01T00:00:00+01:00",
    "an empty object": {},
    "an empty list": [],
    "a nested big integer": {"a": [2**70]},
    "a float as an id": 1.5,
}
# Query strings and headers carry text: the scalar values, and a long string of the length
# a URL may have (servers and proxies refuse more than about 8 KiB).
QUERY_VALUES = {
    **{k: v for k, v in BOUNDARY_VALUES.items() if isinstance(v, str | int)},
    "a long string": "x" * 4_000,
}
# Endless Server-Sent Event streams: their Last-Event-ID bound is in test_input_bounds.
STREAMS = ("/events/stream",)


def operations(app: FastAPI) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path, methods in app.openapi()["paths"].items():
        if path.endswith(STREAMS):
            continue
        for method, operation in methods.items():
            found.append((method.upper(), path, operation))
    return found


def variants(example: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(field, label, body): each field of the example, and each field of the objects it
    holds (a manifest's spec, a batch's first point), set to each boundary value."""
    out = []

    def walk(node: dict[str, Any], rebuild: Any) -> None:
        for field, current in node.items():
            for label, value in BOUNDARY_VALUES.items():
                out.append((field, label, rebuild({**node, field: value})))
            if isinstance(current, dict) and current:
                walk(current, lambda inner, f=field: rebuild({**node, f: inner}))
            elif isinstance(current, list) and current and isinstance(current[0], dict):
                walk(
                    current[0],
                    lambda inner, f=field, rest=current[1:]: rebuild({**node, f: [inner, *rest]}),
                )

    walk(example, lambda body: body)
    return out


def check(response: Any, field: str, where: str) -> None:
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    if response.status_code == 422:
        detail = response.json()["detail"]
        locations = [str(part) for error in detail for part in error["loc"]]
        # In its path, or in its words (a union's discriminator, `kind`, is named there).
        named = field in locations or any(
            re.search(rf"\b{re.escape(field)}\b", error["msg"]) for error in detail
        )
        assert named, f"{where}: 422 names {locations}, not {field!r}: {detail}"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_field_at_its_edges_is_answered_without_a_server_error(
    admin: TestClient, app: FastAPI
) -> None:
    b = project_b(admin)
    bodies = example_bodies(b)
    query = query_for(b)
    sent = 0
    for method, path, operation in operations(app):
        name = operation["operationId"]
        url = concrete_path(path, b)
        if "requestBody" in operation:
            assert name in bodies, f"add an example body for {name} to tests/route_examples.py"
            for field, label, body in variants(bodies[name]):
                response = admin.request(method, url, params=query, json=body)
                check(response, field, f"{method} {path} with {field} = {label}")
                sent += 1
        for parameter in operation.get("parameters", []):
            where, field = parameter["in"], parameter["name"]
            if where not in ("query", "header"):
                continue
            for label, value in QUERY_VALUES.items():
                text = str(value)
                body = bodies.get(name)
                if where == "query":
                    response = admin.request(method, url, params={**query, field: text}, json=body)
                elif text.isascii() and text.isprintable():  # what a header can carry
                    response = admin.request(
                        method, url, params=query, headers={field: text}, json=body
                    )
                else:
                    continue
                check(
                    response,
                    field.lower() if where == "header" else field,
                    f"{method} {path} with {field} = {label}",
                )
                sent += 1
    assert sent > 500
