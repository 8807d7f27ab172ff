"""The online-RL generator's KV pool: what the running episodes can fill, no more."""

import torch

from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.online_rl.kv_sizing import blocks_for_episodes, generator_engine_config
from tests.agents.online_runs import tiny_model


def test_the_pool_holds_every_running_episode_at_full_context() -> None:
    engine = EngineConfig(block_size=16, max_running=256)
    # 64 episodes at once (the engine could run 256), 1,000 tokens -> 63 blocks each.
    assert (
        blocks_for_episodes(engine, EpisodeConfig(concurrency=64), max_seq_len=1000, default=10**6)
        == 64 * 63
    )
    # More episodes than the engine runs at once: the engine's limit counts.
    assert (
        blocks_for_episodes(
            EngineConfig(block_size=16, max_running=8),
            EpisodeConfig(concurrency=64),
            max_seq_len=1024,
            default=10**6,
        )
        == 8 * 64
    )


def test_a_need_beyond_the_default_keeps_the_default() -> None:
    engine = EngineConfig(block_size=16, max_running=256)
    episodes = EpisodeConfig(concurrency=64)
    assert blocks_for_episodes(engine, episodes, max_seq_len=1024, default=4096) is None
    assert blocks_for_episodes(engine, episodes, max_seq_len=1024, default=4097) == 4096


def test_a_given_pool_and_the_cpu_default_stand() -> None:
    model = tiny_model()
    assert next(model.parameters()).device == torch.device("cpu")
    given = EngineConfig(num_blocks=7)
    assert generator_engine_config(given, EpisodeConfig(), model) is given
    default = EngineConfig()
    assert generator_engine_config(default, EpisodeConfig(), model) is default
