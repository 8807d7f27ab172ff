"""Online RL learns: on the one-turn `letter_or_digit` task (reply with a digit), the tiny
GPT's reward rises from chance to most replies within 20 rounds, for every seed, both
synchronously and one version behind, and within 30 two versions behind (the clipped
importance ratio slows it); with a learning rate of 0 it stays at chance. And on the
multi-turn guessing game (a number of 1 or 2, "higher" or "lower" after each guess), the
reward rises from nothing to about half the most a policy can earn."""

import pytest

from crucible.online_rl.health import RoundHealth
from tests.agents.online_runs import DIGITS_ROUNDS, GUESSING_ROUNDS, digits_run, guessing


def rewards(history: list[RoundHealth]) -> list[float]:
    return [h.mean_reward if h.mean_reward is not None else 0.0 for h in history]


def learn(seed: int, max_staleness: int = 0, **changes: object) -> list[float]:
    run = digits_run(seed, max_staleness, **changes)
    return rewards(run.run(DIGITS_ROUNDS[max_staleness]))


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_reward_rises_over_rounds(seed: int, max_staleness: int) -> None:
    curve = learn(seed, max_staleness=max_staleness)
    # A model near uniform over 264 ids starts with a digit about 1 time in 26.
    assert curve[0] < 0.2, curve
    assert sum(curve[-3:]) / 3 > 0.6, curve


def test_without_training_the_reward_stays_at_chance() -> None:
    curve = learn(0, lr=0.0)
    assert max(curve) < 0.2, curve


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_reward_of_a_multi_turn_game_rises_over_rounds(seed: int) -> None:
    curve = rewards(guessing(seed).run(GUESSING_ROUNDS))
    # A reply that is not 1 or 2 earns nothing: near uniform over 264 ids, almost all.
    assert curve[0] < 0.1, curve
    assert sum(curve[-3:]) / 3 > 0.3, curve
