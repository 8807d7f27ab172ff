"""The built-in eval suite `agent-environment`, called as the eval job calls it: a
checkpoint's model plays the environment's episodes through the engine."""

import pytest
import torch

from crucible.config.parse import ConfigError
from crucible.models.tokenizer import ByteTokenizer
from crucible.plugins import EVAL_SUITE, checked_metrics, resolve
from crucible.rollouts.model_handle import CheckpointInfo, ModelHandle
from tests.agents.online_runs import tiny_model


def suite(model: torch.nn.Module | None = None, **options: object) -> dict[str, float]:
    plugin = resolve(
        EVAL_SUITE, "agent-environment", options, where="spec.suite", options_where="config.suite"
    )
    handle = ModelHandle(
        model if model is not None else tiny_model().eval(),
        ByteTokenizer(),
        checkpoint=CheckpointInfo(id=1, run_id=1, step=0),
    )
    return checked_metrics(plugin, plugin(handle))


DIGITS = {
    "environment": "letter_or_digit",
    "options": {"kinds": ["digit"]},
    "episodes": 48,
    "max_turns": 1,
    "max_tokens_per_turn": 1,
}


def test_it_scores_the_episodes_the_model_plays() -> None:
    scores = suite(**DIGITS)
    assert scores["episodes"] == 48 and scores["failed_episodes"] == 0
    # Near uniform over 264 ids, the tiny GPT replies with a digit about 1 time in 26.
    assert 0 <= scores["mean_reward"] < 0.2
    assert scores["turns_per_episode"] == 1 and scores["done_fraction"] == 1.0
    again = suite(**DIGITS)
    assert again == scores, "same tasks, same seeds"


def test_a_multi_turn_environment_with_tools_is_played_to_its_limits(
    chat_model: torch.nn.Module,
) -> None:
    scores = suite(
        chat_model, environment="calculator", episodes=4, max_turns=2, max_tokens_per_turn=8
    )
    # A random model answers nothing right and calls no tool it can parse: every episode
    # runs its two turns.
    assert scores["episodes"] == 4 and scores["turns_per_episode"] == 2
    assert scores["mean_reward"] == 0 and scores["done_fraction"] == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"environment": "nowhere"}, "config.suite.environment"),
        ({"environment": "letter_or_digit", "episodes": 0}, "config.suite.episodes must be"),
        ({"environment": "letter_or_digit", "max_turns": 0}, "config.suite: episode config"),
        ({"environment": "letter_or_digit", "options": {"kinds": ["emoji"]}}, "config.suite.op"),
    ],
)
def test_bad_options_are_config_errors_naming_them(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        suite(**options)
