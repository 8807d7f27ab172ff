"""Batch generation through the engine: what rollouts, evals and teachers call.

An engine sized for the job (its KV pool holds `max_running` sequences of the longest
prompt plus completion), every prompt queued at once, run to the end. Continuous batching
keeps the rows full as short completions finish, where a fixed batch waited for its
longest.
"""

from collections.abc import Sequence

from crucible.engine.config import EngineConfig
from crucible.engine.engine import Engine, RequestOutput
from crucible.engine.params import SamplingParams
from crucible.workloads.hf_model import LanguageModel
from crucible.workloads.tokenizer import Tokenizer

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
