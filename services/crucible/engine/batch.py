"""Batch generation through the engine: what rollouts, evals and teachers call.

An engine sized for the job (its KV pool holds `max_running` sequences of the longest
prompt plus completion), every prompt queued at once, run to the end. Continuous batching
keeps the rows full as short completions finish, where a fixed batch waited for its
longest.
"""

from collections.abc import Sequence

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams
from crucible.engine.engine import Engine, RequestOutput
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer

BLOCK_SIZE = 16


def complete(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    max_running: int,
) -> list[RequestOutput]:
    """`params.n` completions of each prompt (token ids), in the prompts' order; the model
    is left in the mode it was in."""
    if not prompts:
        return []
    rows = min(max_running, len(prompts) * params.n)
    longest = max(len(p) for p in prompts) + params.max_tokens
    blocks_per_row = -(-longest // BLOCK_SIZE)
    config = EngineConfig(block_size=BLOCK_SIZE, num_blocks=rows * blocks_per_row, max_running=rows)
    was_training = model.training
    try:
        return Engine(model, tokenizer, config).generate(prompts, params)
    finally:
        model.train(was_training)
