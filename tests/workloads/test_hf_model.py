"""Hugging Face causal LMs behind the GPT's interface (models/hf.py), built from an
architecture's config (nothing downloaded): padding and the KV cache change no logits, a
model saved as a directory loads back the same, and directories or architectures that
cannot give a model are refused with a message naming them."""

import json
from pathlib import Path

import pytest
import torch

from crucible.models.hf import (
    HFCausalLM,
    HFModelSource,
    ModelSourceError,
    build_hf_model,
)

DECODER = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=264,
    max_position_embeddings=64,
)
"""Llama and Qwen2 take the same config fields."""
SMALL = {
    "llama": DECODER,
    "qwen2": DECODER,
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, vocab_size=264, n_positions=64),
}


def small_model(architecture: str) -> HFCausalLM:
    torch.manual_seed(0)
    source = HFModelSource(architecture=architecture, config=SMALL[architecture])
    return build_hf_model(source).eval()


@pytest.mark.parametrize("architecture", sorted(SMALL))
def test_left_padding_and_the_cache_change_no_logits(architecture: str) -> None:
    model = small_model(architecture)
    assert len(model.blocks) == 2 and model.max_seq_len == 64 and model.vocab_size == 264
    long, short = [5, 6, 7, 8, 9, 10], [11, 12, 13]
    tokens = torch.tensor([long, [0] * 3 + short])
    valid = torch.tensor([[True] * 6, [False] * 3 + [True] * 3])
    with torch.no_grad():
        batched = model(tokens, key_valid=valid)
        alone = model(torch.tensor([short]))
        assert torch.allclose(batched[1, 3:], alone[0], atol=1e-5)
        assert torch.allclose(batched[0], model(torch.tensor([long]))[0], atol=1e-5)

        cache = model.new_cache(2, 6)
        first = model(tokens[:, :4], key_valid=valid[:, :4], cache=cache)
        rest = model(tokens[:, 4:], key_valid=valid, cache=cache)
    assert cache.length == 6
    assert torch.allclose(torch.cat([first, rest], dim=1)[:, 3:], batched[:, 3:], atol=1e-5)


def test_a_sequence_past_the_models_positions_is_refused() -> None:
    model = small_model("llama")
    with pytest.raises(ValueError, match="exceeds max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_a_saved_directory_loads_back_the_same_model(architecture: str, tmp_path: Path) -> None:
    model = small_model(architecture)
    model.save_pretrained(tmp_path)
    loaded = build_hf_model(HFModelSource(path=str(tmp_path))).eval()
    tokens = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded(tokens))
    assert {"config.json", "model.safetensors"} <= {p.name for p in tmp_path.iterdir()}


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    tokens = torch.tensor([[1, 2, 3, 4, 5]])
    grads = []
    for enabled in (False, True):
        model = small_model("llama").train()
        model.activation_checkpointing = enabled
        model(tokens).float().pow(2).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_a_directory_without_config_or_weights_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match=f"{tmp_path} has no config.json"):
        build_hf_model(HFModelSource(path=str(tmp_path)))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickles run code")
    with pytest.raises(ModelSourceError, match=f"{tmp_path} has no safetensors weights"):
        build_hf_model(HFModelSource(path=str(tmp_path)))


def test_an_architecture_that_is_not_a_causal_lm_is_refused() -> None:
    with pytest.raises(ModelSourceError, match="'vit' is not a transformers causal LM"):
        build_hf_model(HFModelSource(architecture="vit"))
    with pytest.raises(ModelSourceError, match="exactly one of path or architecture"):
        HFModelSource(path="/models/x", architecture="llama")
