"""The online-RL generator's KV cache: no larger than the episodes running at once can fill.

The engine's default pool takes `kv_memory_fraction` of the GPU memory free when it starts,
right for a server alone on its device. In online RL the trainer shares that device and
needs what is left for a step's activations and the optimizer's state, which a pool sized
for the device does not leave (docs/agents.md, "Memory on a GPU"). So on CUDA, when the run
does not give `engine.num_blocks`, the pool holds every episode the engine runs at once at
the model's full context and no more; where even that exceeds the engine's default, the
default stands. On the CPU the default is a fixed size (`cpu_kv_gib`) and stays.
"""

from dataclasses import replace

from crucible.config.engine import EngineConfig
from crucible.config.online_rl import EpisodeConfig
from crucible.engine.engine import blocks_that_fit
from crucible.models.hf import LanguageModel


def generator_engine_config(
    engine: EngineConfig, episode: EpisodeConfig, model: LanguageModel
) -> EngineConfig:
    """`engine` for the generator of `model` on its device."""
    if engine.num_blocks is not None or next(model.parameters()).device.type != "cuda":
        return engine
    blocks = blocks_for_episodes(
        engine, episode, max_seq_len=int(model.max_seq_len), default=blocks_that_fit(model, engine)
    )
    return engine if blocks is None else replace(engine, num_blocks=blocks)


def blocks_for_episodes(
    engine: EngineConfig, episode: EpisodeConfig, *, max_seq_len: int, default: int
) -> int | None:
    """The blocks `episode.concurrency` episodes (at most `engine.max_running` at once) of
    `max_seq_len` tokens fill, or None when that is not below the engine's `default`."""
    running = min(engine.max_running, episode.concurrency)
    needed = running * -(-max_seq_len // engine.block_size)
    return needed if needed < default else None
