"""The round loop of online RL: what each round trains on and reports, the check that the
generator runs the trainer's weights, failed episodes, and a preemption that resumes
exactly."""

import copy
import io
import math

import pytest
import torch

from crucible.agents.loading import load_environment
from crucible.agents.policy import PolicyVersion
from crucible.agents.records import EpisodeRecord
from crucible.config.online_rl import DEFAULT_LOGPROB_TOLERANCE
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.health import LogprobMismatch, RoundHealth, TooManyFailedEpisodes
from crucible.online_rl.loop import OnlineRL
from tests.agents.online_runs import config, digits, online, tiny_model

BROKEN = "tests.agents.broken_envs"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"micro_batch_size": -1}, "micro_batch_size must be an integer >= 0 .*got -1"),
        ({"max_staleness": -1}, "max_staleness must be an integer >= 0 .*got -1"),
        ({"group_size": 1}, "group_size must be an integer of at least 2 .*got 1"),
        ({"episodes_per_round": 30}, "episodes_per_round=30 is not a multiple of group_size=8"),
        ({"updates_per_round": 3}, "4 tasks per round .* updates_per_round=3"),
        ({"lr": -0.1}, "lr must be a finite number >= 0, got -0.1"),
        ({"clip_eps": math.nan}, "clip_eps must be a finite number >= 0, got nan"),
        ({"logprob_tolerance": 0.0}, "logprob_tolerance must be > 0"),
        ({"max_failed_fraction": 1.5}, "max_failed_fraction must be from 0 to 1, got 1.5"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config(**changes)


def test_a_synchronous_run_trains_each_round_on_its_own_fresh_samples() -> None:
    seen: list[RoundHealth] = []
    rl = OnlineRL(
        config(),
        tiny_model(),
        ByteTokenizer(),
        digits(),
        start=PolicyVersion(0, checkpoint_id=12, checkpoint_step=300),
        on_round=seen.append,
    )
    history = rl.run(3)
    assert seen == history
    for number, health in enumerate(history):
        assert (health.round, health.version, health.updates) == (number, number + 1, 1)
        assert health.trained_groups == tuple(f"{number}/{task}" for task in range(4))
        assert health.samples_accepted == health.samples_trained == 32
        assert health.staleness_max == 0
        first = health.first_update
        assert first is not None and first.tokens == 32
        # Same weights, same tokens: the trainer agrees with the engine to float rounding.
        assert first.logprob_diff_max < DEFAULT_LOGPROB_TOLERANCE
        assert first.kl == pytest.approx(0.0, abs=1e-9)
        assert first.ratio_mean == pytest.approx(1.0, abs=1e-5)
        assert health.idle_s >= health.generate_s > 0  # the trainer waits for generation
        assert health.weight_update_s > 0
        metrics = health.metrics()
        assert all(isinstance(v, float) for v in metrics.values())
        assert metrics["samples_trained"] == 32.0 and "mean_reward" in metrics
    assert rl.version == PolicyVersion(3, checkpoint_id=12, checkpoint_step=300)
    assert rl.generator.version == rl.version and len(rl.buffer) == 0


def test_with_max_staleness_1_a_round_trains_on_the_batch_sampled_while_the_last_trained() -> None:
    waiting: list[set[tuple[int, int | None]]] = []

    def note_the_waiting_versions(health: RoundHealth) -> None:
        groups = rl.buffer.state_dict()["waiting"]
        policies = [e["policy"] for g in groups for e in g["episodes"]]
        waiting.append({(p["update"], p["checkpoint_id"]) for p in policies})

    run_config = config(max_staleness=1, lr=5e-2, episodes_per_round=64)
    rl = OnlineRL(
        run_config,
        tiny_model(),
        ByteTokenizer(),
        digits(),
        start=PolicyVersion(0, checkpoint_id=12),
        on_round=note_the_waiting_versions,
    )
    history = rl.run(4)
    assert [h.staleness_max for h in history] == [0, 1, 1, 1]
    for number, health in enumerate(history):
        assert {g.split("/")[0] for g in health.trained_groups} == {str(number)}
    # Round 0's batch is generated first, the next one while round 0 trains; each waits
    # for the next round stamped with the version that sampled it.
    assert [h.episodes for h in history] == [128, 64, 64, 0]
    assert waiting == [{(0, 12)}, {(1, 12)}, {(2, 12)}, set()]
    # One version behind, the ratios are not 1, and the agreement check does not apply.
    assert max(h.first_update.logprob_diff_max for h in history[1:]) > DEFAULT_LOGPROB_TOLERANCE  # type: ignore[union-attr]
    assert all(h.first_update.kl >= 0 for h in history)  # type: ignore[union-attr]


def test_with_max_staleness_2_batch_i_is_sampled_by_version_i_minus_2() -> None:
    sampled_by: dict[int, int] = {}

    def note_versions(index: int, records: list[EpisodeRecord]) -> None:
        (sampled_by[index],) = {r.policy.update for r in records if r.policy is not None}

    rl = online(config(max_staleness=2, lr=5e-2))
    rl.on_batch = note_versions
    history = rl.run(6)
    assert sampled_by == {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 3}
    assert [h.staleness_max for h in history] == [0, 1, 2, 2, 2, 2]
    for number, health in enumerate(history):
        assert {g.split("/")[0] for g in health.trained_groups} == {str(number)}
    # From round 3 on the generator is still sampling when the trainer publishes: the new
    # version waits as a snapshot, loaded (and timed) before the batch that needs it.
    assert all(h.weight_update_s > 0 for h in history)
    assert rl.generator.version == rl.version == PolicyVersion(6)
    assert not rl._snapshots and not rl._in_flight  # nothing left behind


def test_a_run_in_two_calls_goes_on_with_the_weights_the_first_left() -> None:
    rl = online(config(max_staleness=2))
    first = rl.run(3)  # batches 0 to 2, the last round sampling nothing ahead
    second = rl.run(3)
    assert [h.staleness_max for h in first + second] == [0, 1, 2, 0, 1, 2]
    assert rl.version == rl.generator.version == PolicyVersion(6)


def test_a_generator_not_running_the_trainers_weights_fails_the_round_loudly() -> None:
    rl = online(config())
    before = copy.deepcopy(rl.learner.model.state_dict())
    with torch.no_grad():
        for param in rl.generator.model.parameters():  # the generator's copy only
            param.add_(torch.randn_like(param) * 1e-3)
    with pytest.raises(
        LogprobMismatch,
        match=r"round 0: .* differ from the generator's by up to \S+ .*logprob_tolerance=0.001",
    ):
        rl.run(2)
    # The check runs before the step: the trainer's weights are as they were.
    after = rl.learner.model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_the_check_runs_at_every_synchronous_round() -> None:
    def corrupt_after_round_1(health: RoundHealth) -> None:
        if health.round == 1:
            with torch.no_grad():
                next(rl.generator.model.parameters()).mul_(1.5)

    rl = online(config())
    rl.on_round = corrupt_after_round_1
    with pytest.raises(LogprobMismatch, match="round 2: "):
        rl.run(4)
    assert rl.round == 2


def test_failed_episodes_are_counted_and_left_out() -> None:
    source = load_environment(f"{BROKEN}:SomeTasksBroken")
    (health,) = online(config(), source=source).run(1)
    # Of 4 tasks of 8 episodes, task 0's rewards are NaN and task 1's step() raises: half.
    assert health.episodes_failed == {"environment_error": 8, "invalid_reward": 8}
    assert health.samples_accepted == health.samples_trained == 16
    assert health.trained_groups == ("0/2", "0/3")
    assert health.metrics()["episodes_failed/invalid_reward"] == 8.0


def test_a_batch_failing_past_the_threshold_fails_the_run_naming_it() -> None:
    everywhere = load_environment(f"{BROKEN}:RaisesInStep")
    with pytest.raises(
        TooManyFailedEpisodes,
        match=r"round 0: 32 of 32 episodes failed \(environment_error 32\), more than "
        r"max_failed_fraction=0.5 allows; the first: episode 0: step\(\) raised KeyError: 'score'",
    ):
        online(config(), source=everywhere).run(1)
    half = load_environment(f"{BROKEN}:SomeTasksBroken")
    with pytest.raises(TooManyFailedEpisodes, match="round 0: 16 of 32 episodes failed"):
        online(config(max_failed_fraction=0.25), source=half).run(1)


class Preempted(Exception):
    pass


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_a_preempted_run_resumes_exactly_without_losing_or_retraining_samples(
    max_staleness: int,
) -> None:
    run_config = config(max_staleness=max_staleness, lr=3e-2)
    whole = online(run_config)
    uninterrupted = whole.run(4)

    saved = io.BytesIO()

    def preempt_after_round_1(health: RoundHealth) -> None:
        if health.round == 1:
            torch.save(first.state_dict(), saved)
            raise Preempted

    first = online(run_config)
    first.on_round = preempt_after_round_1
    with pytest.raises(Preempted):
        first.run(4)
    waiting = len(first.buffer)
    # Asynchronous: round 2's batch, sampled during round 1, was accepted and not trained.
    assert waiting == (4 if max_staleness else 0)

    resumed = online(run_config, seed=99)  # other weights: the checkpoint's must win
    saved.seek(0)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert len(resumed.buffer) == waiting
    rest = resumed.run(2)

    trained = [h.trained_groups for h in uninterrupted]
    assert trained[:2] + [h.trained_groups for h in rest] == trained
    assert [h.mean_reward for h in rest] == [h.mean_reward for h in uninterrupted[2:]]
    assert resumed.version == whole.version == PolicyVersion(4)
    final, expected = resumed.learner.model.state_dict(), whole.learner.model.state_dict()
    assert all(torch.equal(final[name], expected[name]) for name in expected)


def test_resumed_with_a_tighter_bound_the_samples_now_too_old_are_dropped() -> None:
    state = {}

    def keep_round_1(health: RoundHealth) -> None:
        if health.round == 1:
            state.update(copy.deepcopy(ahead.state_dict()))

    ahead = online(config(max_staleness=1))
    ahead.on_round = keep_round_1
    ahead.run(3)
    synchronous = online(config(max_staleness=0))
    synchronous.load_state_dict(state)
    dropped, fresh = synchronous.run(2)
    # Round 2's batch came from version 1; the trainer is at 2 and allows no lag now.
    assert dropped.discarded == {"stale": 32} and dropped.metrics()["discarded_stale"] == 32.0
    assert (dropped.samples_trained, dropped.updates) == (0, 0)
    assert (fresh.samples_trained, fresh.staleness_max) == (32, 0)
