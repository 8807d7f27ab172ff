"""Which paged forward runs a model: the built-in GPT's (`paged_gpt.py`) or a Hugging Face
causal LM's (`paged_hf.py`, which imports transformers, so only when one is asked for)."""

from crucible.engine.paged_gpt import PagedGPT
from crucible.engine.runner import ModelRunner
from crucible.models.gpt import GPT
from crucible.models.hf import HFCausalLM, LanguageModel


def bytes_per_block(model: LanguageModel, block_size: int) -> int:
    """KV cache bytes one block takes for `model`."""
    if isinstance(model, GPT):
        return PagedGPT.bytes_per_block(model, block_size)
    if isinstance(model, HFCausalLM):
        from crucible.engine.paged_hf import PagedHF  # imports transformers: only when needed

        return PagedHF.bytes_per_block(model, block_size)
    raise NotImplementedError(f"no paged runner for {type(model).__name__} yet")


def build_runner(model: LanguageModel, *, num_blocks: int, block_size: int) -> ModelRunner:
    if isinstance(model, GPT):
        return PagedGPT(model, num_blocks=num_blocks, block_size=block_size)
    if isinstance(model, HFCausalLM):
        from crucible.engine.paged_hf import PagedHF  # imports transformers: only when needed

        return PagedHF(model, num_blocks=num_blocks, block_size=block_size)
    raise NotImplementedError(f"no paged runner for {type(model).__name__} yet")
