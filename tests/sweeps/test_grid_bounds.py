"""A sweep's spec is bounded before anything is expanded: a grid of a million points, too
many parameters or values, or too many trials is refused with the limit and the value
named, at once and in little memory; and a stored grid sweep's point n is computed from n,
so the workers' tick never builds the grid."""

import time
import tracemalloc
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from crucible.domain.specs import MAX_GRID_POINTS
from crucible.sweeps.plan import checked_plan, parse_plan
from crucible.sweeps.samplers import grid, grid_point, grid_size
from crucible.sweeps.space import Choice, SearchSpaceError
from tests.conftest import bearer, make_project, make_token
from tests.sweeps.test_sweep_resource import get, submit, sweep, tick

TEN = list(range(1, 11))
MILLION_POINTS = {  # six parameters of ten values: 10^6 combinations
    f"config.train.{key}": {"values": TEN}
    for key in ("steps", "batch_size", "warmup_steps", "grad_accum_steps")
} | {
    "config.train.lr": {"values": [i / 1000 for i in TEN]},
    "config.train.weight_decay": {"values": [i / 100 for i in TEN]},
}
TEN_THOUSAND_POINTS = {  # the largest grid allowed
    f"config.train.{key}": {"values": TEN}
    for key in ("steps", "batch_size", "warmup_steps", "grad_accum_steps")
}


def settings(parameters: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "method": "grid",
        "metric": {"name": "loss", "goal": "minimize"},
        "budget": {"trials": 4},
        "parameters": parameters,
        **changes,
    }


def test_point_n_of_a_grid_is_its_nth_combination_without_the_grid() -> None:
    space = {
        "config.train.lr": Choice((0.1, 0.01)),
        "config.train.steps": Choice((1, 2, 3)),
        "config.train.batch_size": Choice((8, 16)),
    }
    assert grid_size(space) == 12
    assert [grid_point(space, n) for n in range(12)] == grid(space)
    with pytest.raises(IndexError):
        grid_point(space, 12)


def test_a_million_point_grid_is_refused_naming_the_limit_at_once() -> None:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(SearchSpaceError) as refused:
            parse_plan(settings(MILLION_POINTS))
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "the grid has 1000000 points" in str(refused.value)
    assert f"the limit of {MAX_GRID_POINTS}" in str(refused.value)
    assert elapsed < 0.5 and peak < 1_000_000, (elapsed, peak)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"parameters": {f"config.options.k{i}": {"values": [1]} for i in range(33)}},
            "parameters: 33 paths is more than the limit of 32",
        ),
        (
            {"parameters": {"config.train.steps": {"values": list(range(1, 1002))}}},
            "'config.train.steps': 1001 values is more than the limit of 1000",
        ),
        ({"budget": {"trials": 1001}}, "budget.trials=1001 is more than the limit of 1000"),
    ],
)
def test_every_list_of_a_sweep_spec_is_bounded(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message.replace(".", r"\.")):
        parse_plan(settings(TEN_THOUSAND_POINTS, method="random") | changes)


def test_a_stored_grid_sweep_is_planned_without_building_its_grid() -> None:
    """The plan the tick reads (parse_plan, then a trial's point) allocates no grid: the
    largest grid allowed would take megabytes."""
    spec = settings(TEN_THOUSAND_POINTS, budget={"trials": 1000})
    tracemalloc.start()
    try:
        plan = parse_plan(spec)
        last = plan.point(999)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(last.values()) == [1, 10, 10, 10]  # 999: the digits 0, 9, 9, 9
    assert peak < 200_000, peak


def test_a_viewer_validating_a_million_point_grid_is_answered_at_once(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    viewer = bearer(make_token(admin, "vision", "viewer"))
    manifest = sweep(parameters=MILLION_POINTS)
    # Memory, not wall time, tells a bounded check from one that expands the grid (which
    # held hundreds of MB): on a loaded machine even the bounded check can take a second.
    tracemalloc.start()
    try:
        answer = admin.post(
            "/api/v1/manifests/validate",
            json={"project": "vision", "manifest": manifest},
            headers=viewer,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000, peak
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["valid"] is False
    assert [e["path"] for e in body["errors"]] == ["spec"]
    assert "1000000 points" in body["errors"][0]["message"]
    assert f"limit of {MAX_GRID_POINTS}" in body["errors"][0]["message"]


def test_submitting_a_million_point_grid_sweep_is_refused_naming_the_limit(
    admin: TestClient,
) -> None:
    make_project(admin)
    answer = admin.post(
        "/api/v1/sweeps",
        json={"project": "vision", "manifest": sweep(parameters=MILLION_POINTS)},
    )
    assert answer.status_code == 422, answer.text
    message = answer.json()["detail"][0]["msg"]
    assert "1000000 points" in message and f"limit of {MAX_GRID_POINTS}" in message


def test_a_tick_of_a_large_stored_grid_sweep_builds_no_grid(
    app: FastAPI, admin: TestClient
) -> None:
    make_project(admin)
    created = submit(
        admin,
        sweep(
            parameters=TEN_THOUSAND_POINTS,
            budget={"trials": 3, "concurrency": 3},
            earlyStopping=None,
        ),
    )
    tick(app)  # starts the three trials
    assert [t["point"] for t in get(admin, created["id"])["trials"]][2] == {
        "config.train.steps": 1,
        "config.train.batch_size": 1,
        "config.train.warmup_steps": 1,
        "config.train.grad_accum_steps": 3,
    }
    tracemalloc.start()
    try:
        tick(app)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The grid of 10,000 points would be megabytes on its own.
    assert peak < 500_000, peak


def test_trials_times_a_large_config_is_refused_before_checking_any() -> None:
    """Every trial's whole config is checked: a config of megabytes times a thousand trials
    held a worker for minutes."""
    config = {"model": {"preset": "tiny"}, "suite": {f"k{i}": "x" * 100 for i in range(10_000)}}
    spec = settings({}, method="random", budget={"trials": 1000})
    spec["parameters"] = {"config.train.lr": {"min": 0.001, "max": 0.01}}
    started = time.perf_counter()
    with pytest.raises(SearchSpaceError, match=r"more than the limit of 16777216"):
        checked_plan(spec, config)
    assert time.perf_counter() - started < 1.0
    assert checked_plan(spec | {"budget": {"trials": 10}}, config).trials == 10
