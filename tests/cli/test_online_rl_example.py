"""examples/online-rl.yaml runs as its comment says: `crucible submit` while `crucible up`
runs; the local executor picks the online-RL job for its `config.online`, the run
succeeds, its reward rises, its trajectories are published, and each policy checkpoint is
scored by the `agent-environment` eval suite, the later ones better."""

from pathlib import Path

import pytest

from tests.cli.example_runs import example_succeeds

EXAMPLE = Path(__file__).parents[2] / "examples" / "online-rl.yaml"


@pytest.mark.slow
@pytest.mark.timeout(480)  # past its own waits: the server's start, the run
def test_the_online_rl_example_runs_to_success_and_learns(tmp_path: Path) -> None:
    # The run and an EvalJob for each of its 4 checkpoints.
    with example_succeeds(tmp_path, EXAMPLE, runs=5, timeout=300) as done:
        run = done.by_name["online-digits"]
        answer = done.api.request(
            "GET", f"/api/v1/runs/{run.id}/metrics", params={"keys": "reward"}
        )
        (reward,) = answer["series"]
        assert reward["steps"] == list(range(1, 17))
        assert reward["values"][0] < 0.2 and sum(reward["values"][-3:]) / 3 > 0.6, reward
        checkpoints = done.api.list_checkpoints(run.id).items
        assert [c.step for c in checkpoints] == [4, 8, 12, 16]
        scores = {}
        for checkpoint in checkpoints:
            (scored,) = done.api.list_checkpoint_evals(checkpoint.id)
            assert scored.suite == "agent-environment" and scored.scores["episodes"] == 64
            scores[checkpoint.step] = scored.scores["mean_reward"]
        assert scores[16] > 0.6 and scores[16] > scores[4], scores
        trajectories = done.api.request(
            "GET",
            "/api/v1/datasets/resolve",
            params={"project": "default", "ref": "online-digits-trajectories@latest"},
        )
        assert trajectories["produced_by_run_id"] == run.id
        assert trajectories["record_count"] == 16 * 128
