"""The engine on Hugging Face models (engine/paged_hf.py): greedy completions and their
logprobs are those of `rollout.generate` without a cache, for prompts spanning several KV
blocks, for samples sharing a prompt's blocks, under preemption, and with sliding windows;
the model is left as it was for everyone else; chunked attention is refused."""

from dataclasses import replace

import pytest
import torch

from crucible.config.engine import EngineConfig
from crucible.config.model_source import HFModelSource
from crucible.config.sampling import SamplingParams
from crucible.engine.engine import Engine, RequestOutput
from crucible.models.hf import HFCausalLM, build_hf_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.rollout import Generation, generate
from tests.workloads.test_hf_model import DECODER, SMALL

TOK = ByteTokenizer()
BLOCK = 4
PROMPTS = [
    TOK.encode(text, bos=True)
    for text in ["hi", "hello there, how", "a", "the quick brown fox jumps", "seven."]
]
"""3 to 26 tokens: one block to seven, with and without a partial last block."""

NEW_TOKENS = 8
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)

CONFIGS = {
    **{name: (name, config) for name, config in SMALL.items()},
    "mistral-window": ("mistral", DECODER | {"sliding_window": 3}),
    "qwen2-window-on-layer-1": (
        "qwen2",
        DECODER | {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
    ),
}
"""SMALL is llama with grouped-query attention (4 heads, 2 key heads), qwen2 likewise, and
gpt2 (learned positions); then windows of 3 positions, on every layer and on one."""


def tiny(name: str) -> HFCausalLM:
    architecture, config = CONFIGS[name]
    torch.manual_seed(0)
    return build_hf_model(HFModelSource(architecture=architecture, config=config)).eval()


def reference(model: HFCausalLM, prompts: list[list[int]]) -> Generation:
    # eos_id=-1: never produced, as the engine ignores EOS here.
    return generate(
        model, prompts, max_new_tokens=NEW_TOKENS, eos_id=-1, pad_id=TOK.PAD, use_cache=False
    )


def assert_same(outputs: list[RequestOutput], expected: Generation) -> None:
    completions = [c for output in outputs for c in output.completions]
    assert [c.tokens for c in completions] == expected.tokens
    for completion, logprobs in zip(completions, expected.logprobs, strict=True):
        got = [t.logprob for t in completion.logprobs]
        assert got == pytest.approx(logprobs, abs=1e-4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_completions_are_those_of_generate(name: str) -> None:
    model = tiny(name)
    expected = reference(model, PROMPTS)
    engine = Engine(model, TOK, EngineConfig(block_size=BLOCK, num_blocks=64))
    assert_same(engine.generate(PROMPTS, GREEDY), expected)
    # The model attends as before for the trainer and the generators.
    assert model.hf_config._attn_implementation == "sdpa"
    assert reference(model, PROMPTS).tokens == expected.tokens


def test_the_window_changes_what_a_long_prompt_sees() -> None:
    """Else the windowed cases above would pass with the window ignored."""
    prompt = [PROMPTS[3]]
    windowed = Engine(tiny("mistral-window"), TOK, EngineConfig(block_size=BLOCK, num_blocks=16))
    unwindowed = tiny("mistral-window")
    unwindowed.hf_config.sliding_window = None
    full = Engine(unwindowed, TOK, EngineConfig(block_size=BLOCK, num_blocks=16))
    assert windowed.generate(prompt, GREEDY) != full.generate(prompt, GREEDY)


def test_samples_of_one_prompt_compute_it_once() -> None:
    model = tiny("llama")
    prompt = PROMPTS[3]
    engine = Engine(model, TOK, EngineConfig(block_size=BLOCK, num_blocks=64))
    outputs = engine.generate([prompt], replace(GREEDY, n=3))
    assert_same(outputs, reference(model, [prompt] * 3))
    # Each extra sample computes only what follows the prompt's last full block before
    # its last token (that token's logits are always computed).
    tail = (len(prompt) - 1) % BLOCK + 1
    assert engine.counters.prompt_tokens <= len(prompt) + 2 * tail < 2 * len(prompt)


def test_preempted_sequences_finish_with_the_same_tokens() -> None:
    model = tiny("llama")
    roomy = Engine(model, TOK, EngineConfig(block_size=BLOCK, num_blocks=64))
    expected = roomy.generate(PROMPTS, GREEDY)
    # 9 blocks of 4: the longest prompt and its completion (34 tokens) just fit alone.
    tight = Engine(model, TOK, EngineConfig(block_size=BLOCK, num_blocks=9))
    outputs = tight.generate(PROMPTS, GREEDY)
    assert tight.counters.preemptions > 0
    assert [o.completions[0].tokens for o in outputs] == [o.completions[0].tokens for o in expected]
    assert_same(outputs, reference(model, PROMPTS))


def test_a_model_attending_in_chunks_is_refused_by_name() -> None:
    config = DECODER | {"attention_chunk_size": 8, "intermediate_size_mlp": 64}
    model = build_hf_model(HFModelSource(architecture="llama4_text", config=config))
    with pytest.raises(ValueError, match="llama4_text has layers of type chunked_attention"):
        Engine(model, TOK, EngineConfig(block_size=BLOCK, num_blocks=8))
