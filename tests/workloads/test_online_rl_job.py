"""Online RL as a TrainingRun: `python -m crucible.jobs.online_rl` with the
environment the executor sets, against a real API server (SQLite in a temp dir).

The same run twice, one of them preempted by SIGTERM in the middle and resumed as the
executor resumes it: the reward rises, and the resumed run's metrics, checkpoints and
published trajectories are the uninterrupted run's, to the bit and the digest."""

import re
import signal
from dataclasses import dataclass
from typing import Any

import pytest

from crucible.config.workload import model_preset
from crucible.jobs.checkpoints import model_spec_from_meta
from tests.sdk.conftest import server
from tests.workloads.test_jobs import Finished, Platform, platform

__all__ = ["platform", "server"]  # the fixtures, imported for this module

ROUNDS = 16
EVERY = 4
EPISODES = 128
ONLINE = {
    # Reply with a digit: about 1 in 26 at first for the tiny GPT at its initial scale.
    "environment": "letter_or_digit",
    "options": {"kinds": ["digit"]},
    "rounds": ROUNDS,
    "episodes_per_round": EPISODES,
    "group_size": 16,
    "max_staleness": 1,
    "lr": 0.01,
    "seed": 3,
    "episode": {"max_turns": 1, "max_tokens_per_turn": 1},
    "engine": {"num_blocks": 256, "max_running": 128},
}
SPEC = {
    "config": {"model": {"preset": "tiny"}, "online": ONLINE},
    "checkpoints": {"everySteps": EVERY},
}


@dataclass
class Runs:
    whole: int
    whole_result: Finished
    preempted: int
    stopped_at: int
    first: Finished
    resumed: Finished


@pytest.fixture(scope="module")
def runs(platform: Platform) -> Runs:
    whole = platform.submit("train", **SPEC)
    preempted = platform.submit("train", **SPEC)
    whole_job = platform.start("online_rl", whole, label="online")
    first_job = platform.start("online_rl", preempted, label="online attempt 1 (SIGTERM)")
    # Like a node drain: SIGTERM between rounds 3 and ROUNDS.
    first_job.wait_for_line(rf"round 3/{ROUNDS} ")
    first_job.process.send_signal(signal.SIGTERM)
    first = first_job.result()
    assert first.returncode == 143, first.output
    stopped_at = int(re.findall(rf"round (\d+)/{ROUNDS} ", first.output)[-1])

    resumed = platform.start(
        "online_rl",
        preempted,
        attempt=2,
        resume_from=platform.preempted(preempted, stopped_at),
        label=f"online attempt 2 (after round {stopped_at})",
    ).ok()
    return Runs(whole, whole_job.ok(), preempted, stopped_at, first, resumed)


def series(platform: Platform, run_id: int, key: str) -> dict[int, float]:
    answer = platform.api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": key})
    (found,) = answer["series"]
    return dict(zip(found["steps"], found["values"], strict=True))


def trajectories(platform: Platform, run_id: int) -> Any:
    """The newest version of the run's trajectories dataset."""
    ref = f"{platform.api.get_run(run_id).name}-trajectories@latest"
    return platform.api.request(
        "GET", "/api/v1/datasets/resolve", params={"project": "default", "ref": ref}
    )


def test_the_reward_rises_over_the_rounds(platform: Platform, runs: Runs) -> None:
    reward = series(platform, runs.whole, "reward")
    assert sorted(reward) == list(range(1, ROUNDS + 1))
    curve = [reward[r] for r in sorted(reward)]
    assert curve[0] < 0.2, curve
    assert sum(curve[-3:]) / 3 > 0.6, curve


def test_each_round_logs_its_health(platform: Platform, runs: Runs) -> None:
    keys = platform.metric_keys(runs.whole)
    for key in ("generate_s", "train_s", "idle_s", "weight_update_s", "samples_accepted"):
        assert f"rl/{key}" in keys, sorted(keys)
    # The check of the logprobs runs at a round trained on samples of its own version.
    assert "rl/logprob_diff_max" in keys or "rl/kl" in keys, sorted(keys)
    staleness = series(platform, runs.whole, "rl/staleness_max")
    assert set(staleness.values()) <= {0.0, 1.0} and 1.0 in staleness.values()


def test_checkpoints_carry_the_model_and_the_policy_version(platform: Platform, runs: Runs) -> None:
    checkpoints = platform.checkpoints(runs.whole)
    assert [c.step for c in checkpoints] == list(range(EVERY, ROUNDS + 1, EVERY))
    for checkpoint in checkpoints:
        assert checkpoint.meta["mode"] == "online"
        # What evals, rollouts and `crucible serve` rebuild the model from.
        model = model_spec_from_meta(checkpoint.id, checkpoint.meta)
        assert model is not None and model.gpt == model_preset("tiny")
        assert checkpoint.meta["policy"]["update"] == checkpoint.step


def test_a_sigterm_saves_the_round_and_the_resumed_run_matches_bitwise(
    platform: Platform, runs: Runs
) -> None:
    assert 3 <= runs.stopped_at < ROUNDS
    assert f"stopped after round {runs.stopped_at} on SIGTERM" in runs.first.output
    assert f"resumed after round {runs.stopped_at}" in runs.resumed.output
    steps = [c.step for c in platform.checkpoints(runs.preempted)]
    assert steps == sorted({*range(EVERY, ROUNDS + 1, EVERY), runs.stopped_at})
    for key in ("reward", "loss", "rl/samples_trained", "rl/discarded_stale"):
        assert series(platform, runs.preempted, key) == series(platform, runs.whole, key), key


def test_the_trajectories_are_published_once_each_stamped_with_its_policy(
    platform: Platform, runs: Runs
) -> None:
    whole = trajectories(platform, runs.whole)
    preempted = trajectories(platform, runs.preempted)
    assert whole["version"] == preempted["version"] == 1
    assert whole["produced_by_run_id"] == runs.whole
    # Every batch once, the one generated ahead of the preemption not again: same files.
    assert whole["record_count"] == preempted["record_count"] == ROUNDS * EPISODES
    assert whole["digest"] == preempted["digest"]
    # The lineage from a trajectory to the weights of its policy version, where kept.
    kept = {str(c.step): c.id for c in platform.checkpoints(runs.whole)}
    assert whole["schema"]["policy_checkpoints"] == kept
    assert whole["schema"]["policy_start_checkpoint"] is None  # fresh weights


def test_a_run_of_several_processes_is_refused_naming_them(platform: Platform) -> None:
    run_id = platform.submit("train", **SPEC)
    # As torchrun starts each of two processes.
    job = platform.start("online_rl", run_id, extra_env={"WORLD_SIZE": "2", "RANK": "0"})
    finished = job.result()
    assert finished.returncode == 2, finished.output
    assert "online RL runs in one process, and this run has 2 (WORLD_SIZE)" in finished.output
    assert platform.checkpoints(run_id) == []


def test_with_its_generator_in_a_process_the_run_is_the_same_to_the_bit(
    platform: Platform, runs: Runs
) -> None:
    online = {**ONLINE, "generator": "process"}
    spec = {**SPEC, "config": {"model": {"preset": "tiny"}, "online": online}}
    run_id = platform.submit("train", **spec)
    platform.start("online_rl", run_id, label="online, generator process").ok()
    for key in ("reward", "loss", "rl/samples_trained"):
        assert series(platform, run_id, key) == series(platform, runs.whole, key), key
    assert trajectories(platform, run_id)["digest"] == trajectories(platform, runs.whole)["digest"]
    # The weights went through the run's outputs; the last file is removed at the end.
    exchange = platform.home / "runs" / str(run_id) / "outputs" / "policy-weights"
    assert exchange.is_dir() and list(exchange.iterdir()) == []
