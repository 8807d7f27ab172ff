"""The built-in eval suite `agent-environment`: a checkpoint's model plays an agent
environment's episodes through the serving engine, and the suite reports what they came to.

An EvalJob (or a run's `spec.evals`) names it with `suite: agent-environment` and its
options in `config.suite`, e.g. `{environment: calculator, episodes: 64}`; the scores are
recorded against the exact checkpoint evaluated, so an online-RL run's evals join each
policy version's weights to how well they play.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crucible.config.parse import ConfigError

if TYPE_CHECKING:
    from crucible.rollouts.model_handle import ModelHandle

EVAL_TASK_SEED = 1_000_003
"""The tasks' default seed: not one of the seeds online RL draws its batches from
(`online.batch_seed` hashes the run's seed with the round), so the eval's tasks are not a
training batch replayed."""


def environment_reward(
    model: "ModelHandle",
    *,
    environment: str,
    options: Mapping[str, Any] | None = None,
    episodes: int = 64,
    seed: int = EVAL_TASK_SEED,
    max_turns: int = 8,
    max_tokens_per_turn: int = 256,
    temperature: float = 1.0,
    concurrency: int = 64,
) -> dict[str, float]:
    """`episodes` tasks of `environment` (a reference environment's name or an import path,
    with `options`), one episode each at `temperature`: the mean reward, the share of
    episodes that ended because the environment said so, the turns and tool calls per
    episode, and the episodes that failed (an environment that raised, a tool that failed, a
    reward that was not a number)."""
    from crucible.agents.loading import load_environment
    from crucible.agents.records import FAILED_ENDS, EndReason, summary
    from crucible.agents.runner import run_episodes
    from crucible.agents.sandbox import Sandbox
    from crucible.config.engine import EngineConfig
    from crucible.config.online_rl import EpisodeConfig
    from crucible.engine.engine import Engine

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"config.suite.episodes must be a positive integer, got {episodes!r}")
    source = load_environment(
        environment,
        options,
        where="config.suite.environment",
        options_where="config.suite.options",
    )
    try:
        episode = EpisodeConfig(
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            temperature=temperature,
            concurrency=concurrency,
        )
    except ValueError as exc:
        raise ConfigError(f"config.suite: {exc}") from None
    running = min(episodes, concurrency)
    block_size = EngineConfig.block_size
    # Room for every live episode's whole context: the engine never preempts one.
    blocks = running * -(-int(model.model.max_seq_len) // block_size) + 1
    engine = Engine(
        model.model, model.tokenizer, EngineConfig(num_blocks=blocks, max_running=running)
    )
    records = run_episodes(
        engine,
        source,
        source.tasks(episodes, seed),
        seed=seed,
        config=episode,
        sandbox=Sandbox(),
    )
    done = summary(records)
    return {
        "mean_reward": float(done["mean_reward"]),
        "done_fraction": sum(r.end == EndReason.DONE for r in records) / len(records),
        "turns_per_episode": done["turns"] / len(records),
        "tool_calls_per_episode": done["tool_calls"] / len(records),
        "failed_episodes": float(sum(r.end in FAILED_ENDS for r in records)),
        "episodes": float(len(records)),
    }
