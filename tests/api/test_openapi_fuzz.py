"""Schemathesis over the whole OpenAPI schema, as each of project A's three roles and as the
global admin: whatever a client sends, never a 500 nor a request that holds the server for
seconds; nothing of project B changes (its rows, and its files under the home), and nothing
of it shows in A's answers; and a viewer's calls change no row at all.

Runs on SQLite (the error mapping is the same on both databases) with two projects seeded
alike (tests/fuzz_tenancy.py). Generated ids, names and references are often swapped for
real ones of A or B, so cases reach past the lookups into the code that acts on rows.
"""

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import ADMIN_TOKEN, bearer
from tests.fuzz_tenancy import (
    ROLES,
    SLOW_SECONDS,
    B,
    World,
    b_changes,
    build_world,
    diff_keys,
    secret,
    snapshot,
    viewer_changes,
)
from tests.route_examples import MARKER, example_bodies

EXAMPLES_PER_ROLE = 8
"""Cases per operation and role: about 75 operations, so a role's pass is 600 requests."""
EXAMPLES_GLOBAL = 8

# Which seeded rows a parameter of this name refers to (see `Seeded.ids`).
KIND_OF = {
    "project_id": "project",
    "run_id": "run",
    "experiment_id": "experiment",
    "checkpoint_id": "checkpoint",
    "version_id": "version",
    "dataset_id": "dataset",
    "artifact_id": "artifact",
    "token_id": "token",
    "deployment_id": "deployment",
    "sweep_id": "sweep",
    "entity_id": "run",
    "dataset_version_id": "version",
    "produced_by_run_id": "run",
    "eval_run_id": "run",
    "resumed_from_checkpoint_id": "checkpoint",
    "ids": "run",
}


def real_values(world: World, name: str) -> list[Any]:
    """Values of A's and B's rows a parameter called `name` could take; [] for none."""
    projects = (world.a, world.b)
    if name in KIND_OF:
        return [i for p in projects for i in p.ids.get(KIND_OF[name], [])]
    if name in ("project", "cluster_name"):
        return [p.name for p in projects]
    if name == "name":
        return [f"{p.name}-served" for p in projects]
    if name == "ref":
        return [f"{p.name}-data@latest" for p in projects]
    if name == "backend":
        return ["kubernetes", "local"]
    if name == "entity":
        return ["run", "checkpoint", "dataset_version", "artifact"]
    if name == "number":
        return [1, 2]
    return []


def valid_bodies(world: World) -> dict[str, list[Any]]:
    """Per operation id, the valid example bodies of tests/route_examples.py, one naming
    B's rows and one naming A's: generated bodies are mostly refused by validation, so
    without these a write would rarely reach the rows it could harm."""
    bodies: dict[str, list[Any]] = {}
    for seeded in (world.b, world.a):
        ids = {kind: seeded.first(kind) for kind in seeded.ids}
        for name, body in example_bodies(ids).items():
            bodies.setdefault(name, []).append(renamed(body, MARKER, seeded.name))
    return bodies


def renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {k: renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, old, new) for v in value]
    return value.replace(old, new) if isinstance(value, str) else value


def aim(
    case: schemathesis.Case[Any], data: st.DataObject, world: World, examples: list[Any]
) -> None:
    """Half the time swap the generated body for one of `examples` (valid bodies), then
    some generated path, query and top-level body values for real ones."""
    swap: bool = data.draw(st.booleans())
    if examples and swap:
        case.body = copy.deepcopy(data.draw(st.sampled_from(examples)))
    for container in ("path_parameters", "query", "body"):
        values = getattr(case, container)
        if not isinstance(values, dict):
            continue
        aimed = copy.deepcopy(values)
        for name in values:
            real = real_values(world, name)
            if real:
                # Two times in three a real value, else the generated one.
                choices = st.one_of(
                    st.just(values[name]), st.sampled_from(real), st.sampled_from(real)
                )
                aimed[name] = data.draw(choices)
        setattr(case, container, aimed)


def operations(world: World) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", world.app)
    found = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]
        if operation.path.endswith("/events/stream"):
            continue  # endless streams; they have their own tests
        found.append(operation)
    return found


def fuzz(
    world: World, operation: Any, token: str, examples: int, hidden: str | None = None
) -> list[str]:
    """Each of `examples` cases must answer below 500 within SLOW_SECONDS, without the text
    `hidden` in its answer; the failures, as generated (one message each)."""
    headers = bearer(token)
    bodies = valid_bodies(world).get(operation.definition.raw.get("operationId", ""), [])

    @given(case=operation.as_strategy(), data=st.data())
    @settings(
        max_examples=examples,
        # No shrinking: a failure is reported as generated, so that a failing run still
        # ends in bounded time.
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: schemathesis.Case[Any], data: st.DataObject) -> None:
        aim(case, data, world, bodies)
        where = f"{case.method} {case.formatted_path} {case!r}"
        started = time.monotonic()
        try:
            response = case.call(headers=headers)
        except Exception as exc:  # what the app raised reaches here: a 500
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        seconds = time.monotonic() - started
        assert response.status_code < 500, (
            f"{where} answered {response.status_code}: {response.text[:300]}"
        )
        assert seconds < SLOW_SECONDS, f"{where} took {seconds:.1f} s"
        if hidden is not None:
            assert hidden not in response.text, f"{where} showed B's data: {response.text[:300]}"

    try:
        call()
    except BaseExceptionGroup as group:
        return [str(e) for e in group.exceptions]
    except Exception as exc:  # every failure is reported; the other operations still run
        return [str(exc)]
    return []


@pytest.fixture
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield from build_world(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow
@pytest.mark.parametrize("role", ROLES)
def test_project_role_changes_nothing_outside_its_rights(world: World, role: str) -> None:
    problems = []
    fuzzed = operations(world)
    for operation in fuzzed:
        world.heal()  # a fuzzed admin may have deleted A or revoked its tokens
        before, b_files = snapshot(world.app), world.b.files()
        label = f"{operation.label} as A's {role}"
        problems += [
            f"{label}: {p}"
            for p in fuzz(world, operation, world.tokens[role], EXAMPLES_PER_ROLE, hidden=secret(B))
        ]
        after = snapshot(world.app)
        if changed := b_changes(before, after, world.b.first("project")):
            problems.append(f"{label} changed project B's rows: {changed}")
        if world.b.files() != b_files:
            problems.append(
                f"{label} changed project B's files: {diff_keys(b_files, world.b.files())}"
            )
        if role == "viewer" and (changed := viewer_changes(before, after)):
            problems.append(f"{label} wrote rows: {changed}")
    assert len(fuzzed) >= 60
    assert not problems, "\n\n".join(problems)


@pytest.mark.slow
def test_global_admin_gets_no_server_error(world: World) -> None:
    problems = []
    for operation in operations(world):
        world.heal()
        problems += [
            f"{operation.label} as global admin: {p}"
            for p in fuzz(world, operation, ADMIN_TOKEN, EXAMPLES_GLOBAL)
        ]
    assert not problems, "\n\n".join(problems)
