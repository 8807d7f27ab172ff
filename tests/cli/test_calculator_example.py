"""examples/calculator-rl.yaml in the embedded mode, as its comment says: `crucible submit`
while `crucible up` runs. A scripted teacher's episodes, SFT on them, and online RL from that
checkpoint with a tool the model must learn to call; the RL run is preempted in the middle
(`crucible runs preempt`, SIGTERM as a node drain sends) and resumes from its checkpoint.

The resumed run goes on from the round its SIGTERM saved, neither losing nor redoing a
batch (that it equals a run never stopped, to the bit, is held on the real node:
tests/k8s/test_real_node.py). The trajectories, the policy versions and the evals are then
reached from the trajectories dataset through the lineage graph, the same graph the
dashboard draws."""

from pathlib import Path
from typing import Any

import pytest
from benchmarks.calculator_example_figures import played_digests, recorded, rewards_recorded_here
from benchmarks.demo_loop import cpu_model

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.servers import crucible, local_server, wait_for

EXAMPLE = Path(__file__).parents[2] / "examples" / "calculator-rl.yaml"
ROUNDS = 16
EPISODES = 128
EVERY = 4


def series(api: CrucibleClient, run_id: int, key: str) -> dict[int, float]:
    answer = api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": key})
    (found,) = answer["series"] or [{"steps": [], "values": []}]
    return dict(zip(found["steps"], found["values"], strict=True))


@pytest.mark.slow
@pytest.mark.timeout(3300)  # past its own waits: the server's start, the three stages
def test_the_calculator_example_learns_the_tool_and_resumes_exactly(tmp_path: Path) -> None:
    with local_server(tmp_path, command="up") as server:
        submitted = crucible(server.env, "submit", str(EXAMPLE))
        assert submitted.returncode == 0, submitted.stderr
        with CrucibleClient(server.url, server.token) as api:

            def run_named(name: str) -> Any:
                found = api.list_runs(project="default", limit=100).items
                return next((r for r in found if r.name == name), None)

            rl = wait_for("the RL run", lambda: run_named("calculator-rl"), 60)
            # The wait covers the SFT run's 1,000 steps as well: under CI's load, with the
            # cluster tests beside these, they alone took 28 minutes once.
            wait_for("round 3", lambda: len(series(api, rl.id, "reward")) >= 3, 2700)
            preempted = crucible(server.env, "runs", "preempt", str(rl.id))
            assert preempted.returncode == 0, preempted.stderr

            def all_ended() -> Any:
                found = api.list_runs(project="default", limit=100).items
                rl_ended = any(r.id == rl.id and r.phase.is_terminal for r in found)
                # The 3 submitted and an eval of each RL checkpoint: 4 on the grid and,
                # unless the preemption came right after one, the one it saved.
                checkpoints = api.list_checkpoints(rl.id).items
                ended = (
                    rl_ended
                    and len(found) >= 3 + len(checkpoints)
                    and all(r.phase.is_terminal for r in found)
                )
                return found if ended else None

            runs = {r.name: r for r in wait_for("every run", all_ended, 1200)}
            report = [(r.name, r.phase, r.reason, r.message) for r in runs.values()]
            assert all(r.phase == Phase.Succeeded for r in runs.values()), (
                report,
                server.log.read_text()[-3000:],
            )
            check_learning_and_resume(api, runs)
            check_the_recorded_rounds(api, runs, server.home)
            check_lineage(api, runs)


def check_learning_and_resume(api: CrucibleClient, runs: dict[str, Any]) -> None:
    rl = runs["calculator-rl"].id
    attempts = api.list_attempts(rl)
    assert [a.end_reason for a in attempts] == ["Preempted", "Completed"], attempts
    checkpoint_id = attempts[1].resumed_from_checkpoint_id
    assert checkpoint_id is not None, attempts
    resumed_from = api.get_checkpoint(checkpoint_id)
    assert 3 <= resumed_from.step < ROUNDS, resumed_from
    assert resumed_from.meta["policy"]["update"] == resumed_from.step

    # Every round once, the ones after the preemption by the second attempt.
    reward = series(api, rl, "reward")
    assert sorted(reward) == list(range(1, ROUNDS + 1)), reward
    curve = [reward[r] for r in sorted(reward)]
    # Imitation left the model answering some tasks in its head, wrongly: RL teaches it
    # to call the tool. The reward follows, less steadily: the model still miscopies.
    calls = series(api, rl, "rl/tool_calls_per_episode")
    ordered = [calls[r] for r in sorted(calls)]
    assert sum(ordered[-4:]) / 4 > sum(ordered[:4]) / 4 + 0.08, ordered
    assert sum(curve[-4:]) / 4 > sum(curve[:4]) / 4 + 0.05, curve

    trajectories = api.request(
        "GET",
        "/api/v1/datasets/resolve",
        params={"project": "default", "ref": "calculator-rl-trajectories@latest"},
    )
    # Every batch once: the one sampled ahead of the preemption neither lost nor redone.
    assert trajectories["record_count"] == ROUNDS * EPISODES
    assert trajectories["produced_by_run_id"] == rl

    scores = {}
    for checkpoint in api.list_checkpoints(rl).items:
        (scored,) = api.list_checkpoint_evals(checkpoint.id)
        assert scored.suite == "agent-environment" and scored.scores["episodes"] == 64
        scores[checkpoint.step] = scored.scores
    assert set(range(EVERY, ROUNDS + 1, EVERY)) <= set(scores), scores
    first, last = scores[EVERY], scores[ROUNDS]
    assert last["tool_calls_per_episode"] > first["tool_calls_per_episode"], scores


def check_the_recorded_rounds(api: CrucibleClient, runs: dict[str, Any], home: Path) -> None:
    """The rounds benchmarks/results/calculator_example.json recorded: the same episodes
    (indexes, seeds, tasks), and where a run on this CPU model was recorded, the same
    rewards. The real-node test holds its pods to the same figures, so a change that moves
    them fails here first, where recording them again is one command."""
    rl = runs["calculator-rl"].id
    trajectories = home / "runs" / str(rl) / "outputs" / "trajectories"
    assert played_digests(trajectories) == recorded()["played"]
    expected = rewards_recorded_here()
    if expected is not None:
        reward = series(api, rl, "reward")
        curve = [reward[r] for r in sorted(reward)]
        assert curve == pytest.approx(expected, abs=2 / EPISODES + 1e-4), cpu_model()


def check_lineage(api: CrucibleClient, runs: dict[str, Any]) -> None:
    """From the trajectories: the RL run that made them, the SFT checkpoint it started from,
    the SFT run, the demonstrations and the job that played them; and downstream of the RL
    run, its checkpoints and their evals."""
    trajectories = api.request(
        "GET",
        "/api/v1/datasets/resolve",
        params={"project": "default", "ref": "calculator-rl-trajectories@latest"},
    )
    up = api.lineage("dataset_version", trajectories["id"], direction="upstream", depth=6)
    found = {(n["type"], n["label"]) for n in up["nodes"]}
    labels = {label for _, label in found}
    for name in ("calculator-rl", "calculator-sft", "calculator-demos"):
        assert any(name in label for label in labels), (name, sorted(found))
    types = {kind for kind, _ in found}
    assert {"run", "checkpoint", "dataset_version"} <= types, sorted(found)

    down = api.lineage("run", runs["calculator-rl"].id, direction="downstream", depth=3)
    kinds = [n["type"] for n in down["nodes"]]
    assert kinds.count("checkpoint") >= 3 and "eval_result" in kinds, kinds
