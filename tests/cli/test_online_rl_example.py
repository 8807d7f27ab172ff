"""examples/online-rl.yaml runs as its comment says: `crucible submit` while `crucible up`
runs; the local executor picks the online-RL job for its `config.online`, the run
succeeds, its reward rises and its trajectories are published."""

from pathlib import Path

import pytest

from tests.cli.example_runs import example_succeeds

EXAMPLE = Path(__file__).parents[2] / "examples" / "online-rl.yaml"


@pytest.mark.slow
@pytest.mark.timeout(420)  # past its own waits: the server's start, the run
def test_the_online_rl_example_runs_to_success_and_learns(tmp_path: Path) -> None:
    with example_succeeds(tmp_path, EXAMPLE, runs=1, timeout=240) as done:
        run = done.by_name["online-digits"]
        answer = done.api.request(
            "GET", f"/api/v1/runs/{run.id}/metrics", params={"keys": "reward"}
        )
        (reward,) = answer["series"]
        assert reward["steps"] == list(range(1, 17))
        assert reward["values"][0] < 0.2 and sum(reward["values"][-3:]) / 3 > 0.6, reward
        assert [c.step for c in done.api.list_checkpoints(run.id).items] == [4, 8, 12, 16]
        trajectories = done.api.request(
            "GET",
            "/api/v1/datasets/resolve",
            params={"project": "default", "ref": "online-digits-trajectories@latest"},
        )
        assert trajectories["produced_by_run_id"] == run.id
        assert trajectories["record_count"] == 16 * 128
