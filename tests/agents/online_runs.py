"""What the online-RL tests (and benchmarks/online_learning_seeds.py) share: the tiny GPT
at its own (small) initial scale, which samples nearly uniformly at first, and runs of the
one-turn `letter_or_digit` environment and the multi-turn guessing game small enough for a
CPU."""

import torch

from crucible.agents.loading import EnvironmentSource, load_environment
from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig, OnlineRLConfig
from crucible.config.workload import model_preset
from crucible.models.gpt import GPT, build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.loop import OnlineRL

ONE_CHARACTER = EpisodeConfig(max_turns=1, max_tokens_per_turn=1)
"""One turn, one token: the reply is its first character."""


def tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return build_model(model_preset("tiny"))


def digits() -> EnvironmentSource:
    """Reply with a digit: about 1 in 26 at first, for a model near uniform over 264 ids."""
    return load_environment("letter_or_digit", {"kinds": ["digit"]})


def config(**changes: object) -> OnlineRLConfig:
    """4 tasks of 8 episodes a round, one update, synchronous, unless `changes` say
    otherwise."""
    fields: dict[str, object] = {
        "episodes_per_round": 32,
        "group_size": 8,
        "lr": 1e-2,
        "episode": ONE_CHARACTER,
        "engine": EngineConfig(num_blocks=256, max_running=128),
    }
    return OnlineRLConfig(**{**fields, **changes})  # type: ignore[arg-type]


def online(
    run_config: OnlineRLConfig, *, seed: int = 0, source: EnvironmentSource | None = None
) -> OnlineRL:
    return OnlineRL(run_config, tiny_model(seed), ByteTokenizer(), source or digits())


DIGITS_ROUNDS = {0: 20, 1: 20, 2: 30}
"""The learning test's rounds by max_staleness: two versions behind learns slower
(docs/agents.md, "The learning test", has the seeds measured)."""


def digits_run(seed: int, max_staleness: int = 0, **changes: object) -> OnlineRL:
    """The learning test's run of `letter_or_digit` with digits: 8 tasks of 16 episodes a
    round."""
    run_config = config(
        episodes_per_round=128, group_size=16, seed=seed, max_staleness=max_staleness, **changes
    )
    return online(run_config, seed=seed)


GUESSING_ROUNDS = 20


def guessing(seed: int) -> OnlineRL:
    """The guessing game over 1 and 2, several turns an episode: the tiny GPT, its context
    stretched to hold the game's messages, replying with one character a turn."""
    torch.manual_seed(seed)
    model = build_model(model_preset("tiny", max_seq_len=256))
    run_config = config(
        episodes_per_round=128,
        group_size=16,
        seed=seed,
        episode=EpisodeConfig(max_turns=4, max_tokens_per_turn=1),
        engine=EngineConfig(num_blocks=1024, max_running=128),
    )
    game = load_environment("guessing", {"high": 2})
    return OnlineRL(run_config, model, ByteTokenizer(), game)
