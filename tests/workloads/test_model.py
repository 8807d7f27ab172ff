"""The GPT: cached decoding equals uncached decoding; padding does not change answers."""

import pytest
import torch

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model, flops_per_token, num_params
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.rollout import generate

TOK = ByteTokenizer()


PROMPTS = ["1+2=", "37+58=", "9*9=", "123-4=", "7="]


def test_greedy_with_cache_equals_greedy_without(model) -> None:
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    kwargs = dict(max_new_tokens=12, eos_id=TOK.EOS, pad_id=TOK.PAD)
    cached = generate(model, prompts, use_cache=True, **kwargs)
    uncached = generate(model, prompts, use_cache=False, **kwargs)
    assert cached.tokens == uncached.tokens
    assert len({tuple(t) for t in cached.tokens}) > 1
    for a, b in zip(cached.logprobs, uncached.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_a_prompt_gets_the_same_answer_alone_and_in_a_padded_batch(model) -> None:
    prompts = [TOK.encode(p, bos=True) for p in PROMPTS]
    kwargs = dict(max_new_tokens=8, eos_id=TOK.EOS, pad_id=TOK.PAD)
    batched = generate(model, prompts, **kwargs).tokens
    alone = [generate(model, [p], **kwargs).tokens[0] for p in prompts]
    assert batched == alone


def test_cached_logits_match_a_full_forward(model) -> None:
    tokens = torch.tensor([TOK.encode("37+58=95", bos=True)])
    full = model(tokens)
    cache = model.new_cache(1, tokens.size(1))
    prefix = model(tokens[:, :5], cache=cache)
    steps = [model(tokens[:, i : i + 1], cache=cache) for i in range(5, tokens.size(1))]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=1e-5)


def test_too_long_a_sequence_is_refused(model) -> None:
    with pytest.raises(ValueError, match="max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_parameter_count_and_flops_grow_with_the_preset() -> None:
    tiny, small = model_preset("tiny"), model_preset("small")
    tiny_model = build_model(tiny)
    # Tied head: the output projection adds no parameters.
    assert tiny_model.lm_head.weight is tiny_model.wte.weight
    d, layers = tiny.d_model, tiny.n_layer
    per_block = 12 * d * d + 13 * d  # qkv, proj, mlp weights and biases, two norms
    embeddings = (tiny.vocab_size + tiny.max_seq_len) * d
    assert num_params(tiny_model) == layers * per_block + embeddings + 2 * d
    assert num_params(tiny_model, exclude_embeddings=True) == layers * per_block + 2 * d
    assert flops_per_token(small, 64) > flops_per_token(tiny, 64) > 6 * layers * 12 * d * d
    gpt2 = model_preset("124M")
    # About 6 * 124M plus attention: the figure MFU reports are computed from.
    assert 0.7e9 < flops_per_token(gpt2, 1024) < 0.9e9
