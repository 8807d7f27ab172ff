"""Lineage graph walks: a real datagen -> SFT -> eval -> RL loop, and a random DAG checked
against a breadth-first search in Python over the same edges."""

import random
from collections import defaultdict
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crucible.core import lineage as lineage_core
from tests.api.test_checkpoints_datasets import (
    API,
    link_input,
    record_eval,
    register_checkpoint,
    register_dataset,
    submit_kind,
    submit_train,
)
from tests.conftest import bearer, make_project, make_token

Node = tuple[str, int]
Edge = tuple[Node, Node, str]


def walk(
    client: TestClient, node: Node, direction: str, depth: int, **headers: str
) -> dict[str, Any]:
    response = client.get(
        f"{API}/lineage/{node[0]}/{node[1]}",
        params={"direction": direction, "depth": depth},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def node_set(graph: dict[str, Any]) -> set[Node]:
    return {(n["type"], n["id"]) for n in graph["nodes"]}


def edge_set(graph: dict[str, Any]) -> set[Edge]:
    return {
        (
            (e["source"]["type"], e["source"]["id"]),
            (e["target"]["type"], e["target"]["id"]),
            e["relation"],
        )
        for e in graph["edges"]
    }


def build_loop(admin: TestClient) -> dict[str, Node]:
    """datagen produces prompts@1 -> sft reads it and writes two checkpoints -> an eval run
    scores both -> rl starts from the best one."""
    make_project(admin)
    datagen = submit_kind(admin, "RolloutJob", "datagen")
    version = register_dataset(admin, produced_by_run_id=datagen["id"])
    sft = submit_train(admin, name="sft-1")
    link_input(admin, sft["id"], dataset_version_id=version["id"])
    early = register_checkpoint(admin, sft["id"], 100)
    late = register_checkpoint(admin, sft["id"], 200)
    evaluation = submit_kind(admin, "EvalJob", "eval-sft")
    early_score = record_eval(admin, early["id"], {"accuracy": 0.4}, eval_run_id=evaluation["id"])
    late_score = record_eval(admin, late["id"], {"accuracy": 0.7}, eval_run_id=evaluation["id"])
    best = admin.get(
        f"{API}/runs/{sft['id']}/checkpoints/best", params={"metric": "accuracy"}
    ).json()
    assert best["id"] == late["id"]
    rl = submit_train(admin, name="rl-1")
    link_input(admin, rl["id"], checkpoint_id=best["id"])
    return {
        "datagen": ("run", datagen["id"]),
        "data": ("dataset_version", version["id"]),
        "sft": ("run", sft["id"]),
        "early": ("checkpoint", early["id"]),
        "late": ("checkpoint", late["id"]),
        "eval": ("run", evaluation["id"]),
        "early_score": ("eval_result", early_score["id"]),
        "late_score": ("eval_result", late_score["id"]),
        "rl": ("run", rl["id"]),
    }


def test_upstream_of_the_rl_run_follows_the_loop_back_to_the_data(admin: TestClient) -> None:
    n = build_loop(admin)
    full = walk(admin, n["rl"], "upstream", 10)
    assert node_set(full) == {n["rl"], n["late"], n["sft"], n["data"], n["datagen"]}
    assert edge_set(full) == {
        (n["late"], n["rl"], "initialised"),
        (n["sft"], n["late"], "produced"),
        (n["data"], n["sft"], "consumed_by"),
        (n["datagen"], n["data"], "produced"),
    }
    assert full["root"] == {"type": "run", "id": n["rl"][1]} and not full["truncated"]
    by_node = {(x["type"], x["id"]): x for x in full["nodes"]}
    assert by_node[n["data"]]["label"] == "prompts@1" and by_node[n["data"]]["depth"] == 3
    assert by_node[n["late"]]["label"] == "sft-1 step 200"
    assert by_node[n["sft"]]["data"]["kind"] == "train"

    expected_by_depth = [n["rl"], n["late"], n["sft"], n["data"], n["datagen"]]
    for depth in range(1, 5):
        assert node_set(walk(admin, n["rl"], "upstream", depth)) == set(
            expected_by_depth[: depth + 1]
        ), depth


def test_downstream_of_the_dataset_reaches_checkpoints_evals_and_the_rl_run(
    admin: TestClient,
) -> None:
    n = build_loop(admin)
    full = walk(admin, n["data"], "downstream", 10)
    assert node_set(full) == {
        n[k] for k in ("data", "sft", "early", "late", "eval", "early_score", "late_score", "rl")
    }
    assert edge_set(full) == {
        (n["data"], n["sft"], "consumed_by"),
        (n["sft"], n["early"], "produced"),
        (n["sft"], n["late"], "produced"),
        (n["early"], n["eval"], "initialised"),
        (n["late"], n["eval"], "initialised"),
        (n["early"], n["early_score"], "scored_by"),
        (n["late"], n["late_score"], "scored_by"),
        (n["eval"], n["early_score"], "produced"),
        (n["eval"], n["late_score"], "produced"),
        (n["late"], n["rl"], "initialised"),
    }
    depths = {(x["type"], x["id"]): x["depth"] for x in full["nodes"]}
    assert depths[n["eval"]] == 3 and depths[n["late_score"]] == 3 and depths[n["rl"]] == 3
    assert node_set(walk(admin, n["data"], "downstream", 2)) == {
        n["data"],
        n["sft"],
        n["early"],
        n["late"],
    }
    score = next(x for x in full["nodes"] if (x["type"], x["id"]) == n["late_score"])
    assert score["label"] == "gsm8k: accuracy=0.7"


def test_both_directions_join_ancestors_and_descendants(admin: TestClient) -> None:
    n = build_loop(admin)
    both = walk(admin, n["late"], "both", 1)
    assert node_set(both) == {n["late"], n["sft"], n["eval"], n["late_score"], n["rl"]}
    assert (n["sft"], n["late"], "produced") in edge_set(both)
    assert (n["late"], n["rl"], "initialised") in edge_set(both)


def test_walk_refusals_and_visibility(admin: TestClient) -> None:
    n = build_loop(admin)
    make_project(admin, "audio")
    outsider = make_token(admin, "audio", "admin")
    viewer = make_token(admin, "vision", "viewer")
    url = f"{API}/lineage/run/{n['rl'][1]}"
    assert admin.get(url, headers=bearer(outsider)).status_code == 404
    assert admin.get(url, headers=bearer(viewer)).status_code == 200
    assert admin.get(f"{API}/lineage/run/99999").status_code == 404
    assert admin.get(f"{API}/lineage/checkpoint/99999").status_code == 404
    assert admin.get(f"{API}/lineage/project/1").status_code == 422
    for depth in (0, 51):
        assert admin.get(url, params={"depth": depth}).status_code == 422
    assert admin.get(url, params={"direction": "sideways"}).status_code == 422


def test_cycles_end_at_the_depth_limit(admin: TestClient) -> None:
    """A run that reads its own output makes a cycle; the walk must still end."""
    make_project(admin)
    run = submit_train(admin)
    version = register_dataset(admin, produced_by_run_id=run["id"])
    link_input(admin, run["id"], dataset_version_id=version["id"])
    graph = walk(admin, ("run", run["id"]), "both", 50)
    assert node_set(graph) == {("run", run["id"]), ("dataset_version", version["id"])}
    assert len(graph["edges"]) == 2


def test_node_cap_truncates_keeping_the_nearest(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = build_loop(admin)
    monkeypatch.setattr(lineage_core, "NODE_CAP", 3)
    graph = walk(admin, n["rl"], "upstream", 10)
    assert graph["truncated"]
    assert node_set(graph) == {n["rl"], n["late"], n["sft"]}
    assert all(e[0] in node_set(graph) and e[1] in node_set(graph) for e in edge_set(graph))
    monkeypatch.setattr(lineage_core, "ROW_CAP", 2)
    assert walk(admin, n["rl"], "upstream", 10)["truncated"]


# --- random DAG -----------------------------------------------------------------------------


def build_random_dag(admin: TestClient, size: int, seed: int) -> tuple[list[Node], set[Edge]]:
    """Entities made in random order through the API, each wired to random earlier ones the
    way real loops are; returns the nodes and the edges the API should have written."""
    rng = random.Random(seed)
    make_project(admin)
    runs: list[int] = []
    eval_runs: list[int] = []
    versions: list[int] = []
    checkpoints: list[tuple[int, int]] = []  # (checkpoint id, run id)
    steps: dict[int, int] = defaultdict(int)
    nodes: list[Node] = []
    edges: set[Edge] = set()

    def new_run() -> int:
        run_id = int(submit_train(admin, name=f"r{len(runs)}")["id"])
        runs.append(run_id)
        nodes.append(("run", run_id))
        for version_id in rng.sample(versions, min(len(versions), rng.randint(0, 2))):
            link_input(admin, run_id, dataset_version_id=version_id)
            edges.add((("dataset_version", version_id), ("run", run_id), "consumed_by"))
        if checkpoints and rng.random() < 0.5:
            checkpoint_id, _ = rng.choice(checkpoints)
            link_input(admin, run_id, checkpoint_id=checkpoint_id)
            edges.add((("checkpoint", checkpoint_id), ("run", run_id), "initialised"))
        return run_id

    while len(nodes) < size:
        choice = rng.random()
        if not runs or choice < 0.25:
            new_run()
        elif choice < 0.45:
            producer = rng.choice(runs) if rng.random() < 0.8 else None
            version = register_dataset(
                admin,
                name=f"d{rng.randint(0, 4)}",
                content=f"v{len(nodes)}",
                produced_by_run_id=producer,
            )
            versions.append(version["id"])
            nodes.append(("dataset_version", version["id"]))
            if producer is not None:
                edges.add((("run", producer), ("dataset_version", version["id"]), "produced"))
        elif choice < 0.75:
            run_id = rng.choice(runs)
            steps[run_id] += 100
            checkpoint = register_checkpoint(admin, run_id, steps[run_id])
            checkpoints.append((checkpoint["id"], run_id))
            nodes.append(("checkpoint", checkpoint["id"]))
            edges.add((("run", run_id), ("checkpoint", checkpoint["id"]), "produced"))
        elif checkpoints:
            checkpoint_id, _ = rng.choice(checkpoints)
            eval_run_id = None
            if rng.random() < 0.6:
                if not eval_runs or rng.random() < 0.3:
                    eval_run = submit_kind(admin, "EvalJob", f"e{len(eval_runs)}")
                    eval_runs.append(eval_run["id"])
                    nodes.append(("run", eval_run["id"]))
                eval_run_id = rng.choice(eval_runs)
            result = record_eval(
                admin,
                checkpoint_id,
                {"score": rng.random()},
                suite=f"s{len(nodes)}",
                eval_run_id=eval_run_id,
            )
            nodes.append(("eval_result", result["id"]))
            edges.add((("checkpoint", checkpoint_id), ("eval_result", result["id"]), "scored_by"))
            if eval_run_id is not None:
                edges.add((("run", eval_run_id), ("eval_result", result["id"]), "produced"))
                edges.add((("checkpoint", checkpoint_id), ("run", eval_run_id), "initialised"))
    return nodes, edges


def bfs(
    edges: set[Edge], root: Node, direction: str, depth: int
) -> tuple[dict[Node, int], set[Edge]]:
    """Hop distances within `depth` and the edges leaving every node closer than `depth`."""
    forward: dict[Node, list[Edge]] = defaultdict(list)
    backward: dict[Node, list[Edge]] = defaultdict(list)
    for edge in edges:
        forward[edge[0]].append(edge)
        backward[edge[1]].append(edge)
    distances: dict[Node, int] = {root: 0}
    walked: set[Edge] = set()
    walks = {"upstream": [True], "downstream": [False], "both": [True, False]}[direction]
    for upstream in walks:
        adjacency = backward if upstream else forward
        seen = {root: 0}
        frontier = [root]
        for hop in range(1, depth + 1):
            following = []
            for node in frontier:
                for edge in adjacency[node]:
                    walked.add(edge)
                    neighbour = edge[0] if upstream else edge[1]
                    if neighbour not in seen:
                        seen[neighbour] = hop
                        following.append(neighbour)
            frontier = following
        for node, hop in seen.items():
            distances[node] = min(hop, distances.get(node, hop))
    return distances, walked


def test_random_dag_matches_breadth_first_search(admin: TestClient) -> None:
    nodes, edges = build_random_dag(admin, size=300, seed=7)
    rng = random.Random(11)
    roots = rng.sample(nodes, 12)
    for root in roots:
        for direction in ("upstream", "downstream", "both"):
            for depth in (1, 3, 10):
                graph = walk(admin, root, direction, depth)
                distances, walked = bfs(edges, root, direction, depth)
                got = {(x["type"], x["id"]): x["depth"] for x in graph["nodes"]}
                assert got == distances, (root, direction, depth)
                assert edge_set(graph) == walked, (root, direction, depth)
                assert not graph["truncated"]
    # Every edge touches a run or a checkpoint, so one hop from each of them sees all of the
    # edges: exactly those the facts explain, no more.
    seen_edges: set[Edge] = set()
    for node in nodes:
        if node[0] in ("run", "checkpoint"):
            seen_edges |= edge_set(walk(admin, node, "both", 1))
    assert seen_edges == edges
