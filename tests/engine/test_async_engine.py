"""`AsyncEngine` refuses a request the engine could never run in the caller's task, before
it reaches the engine thread, where an error would stop the engine for every request."""

import asyncio

import pytest

from crucible.config.engine import EngineConfig
from crucible.config.sampling import InvalidParameter, SamplingParams
from crucible.engine.async_engine import AsyncEngine, Delta
from crucible.engine.engine import Engine
from crucible.models.gpt import GPT
from crucible.models.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
PARAMS = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)


async def _deltas(engine: AsyncEngine, prompt: list[int]) -> list[Delta]:
    return [delta async for delta in engine.generate(prompt, PARAMS)]


def test_a_prompt_id_outside_the_vocabulary_is_refused_and_the_engine_serves_on(
    model: GPT,
) -> None:
    engine = AsyncEngine(Engine(model, TOK, EngineConfig(block_size=4, num_blocks=32)))
    vocab = model.config.vocab_size
    engine.start()
    try:
        with pytest.raises(InvalidParameter, match=f"token id {vocab} ") as error:
            asyncio.run(_deltas(engine, [TOK.BOS, vocab]))
        assert error.value.field == "prompt"
        assert engine.healthy
        deltas = asyncio.run(_deltas(engine, [TOK.BOS, vocab - 1]))
        assert [delta.finish_reason is not None for delta in deltas] == [False, False, True]
    finally:
        engine.stop()
