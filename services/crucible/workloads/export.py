"""Checkpoints as Hugging Face model directories: config.json, model.safetensors and the
tokenizer, loadable by transformers (and by `model: {hf: {path: ...}}`) without Crucible.

The built-in GPT is GPT-2's architecture (pre-norm blocks, fused QKV, tanh-GELU MLP,
learned positions, tied embeddings, LayerNorm eps 1e-5), so it exports as a
`GPT2LMHeadModel` whose logits equal the GPT's; its byte tokenizer exports as a byte-level
BPE without merges whose ids are the bytes themselves, then BOS, EOS and PAD. A Hugging
Face model exports as itself with the tokenizer it was trained with.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from crucible.workloads.bpe import SPECIAL_TOKEN_ROLES
from crucible.workloads.config import ModelConfig
from crucible.workloads.hf_model import quiet_transformers
from crucible.workloads.tokenizer import ByteTokenizer

BYTE_SPECIAL_IDS = {
    SPECIAL_TOKEN_ROLES["bos_token"]: ByteTokenizer.BOS,
    SPECIAL_TOKEN_ROLES["eos_token"]: ByteTokenizer.EOS,
    SPECIAL_TOKEN_ROLES["pad_token"]: ByteTokenizer.PAD,
}


def gpt2_config(config: ModelConfig) -> Any:
    """The transformers GPT-2 config of the built-in GPT's shape (no dropout: the GPT has none)."""
    from transformers import GPT2Config

    tok = ByteTokenizer
    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_seq_len,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.mlp_ratio * config.d_model,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tok.BOS,
        eos_token_id=tok.EOS,
        pad_token_id=tok.PAD,
    )


def gpt_to_gpt2_state(state: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The GPT's weights under GPT-2's names; GPT-2's Conv1D keeps (in, out), so the
    Linear weights are transposed."""
    out = {
        "transformer.wte.weight": state["wte.weight"],
        "transformer.wpe.weight": state["wpe.weight"],
        "transformer.ln_f.weight": state["ln_f.weight"],
        "transformer.ln_f.bias": state["ln_f.bias"],
    }
    linear = {
        "attn.qkv": "attn.c_attn",
        "attn.proj": "attn.c_proj",
        "mlp.up": "mlp.c_fc",
        "mlp.down": "mlp.c_proj",
    }
    norms = {"ln_attn": "ln_1", "ln_mlp": "ln_2"}
    for layer in range(config.n_layer):
        ours, theirs = f"blocks.{layer}.", f"transformer.h.{layer}."
        for name, hf_name in linear.items():
            out[f"{theirs}{hf_name}.weight"] = state[f"{ours}{name}.weight"].t().contiguous()
            out[f"{theirs}{hf_name}.bias"] = state[f"{ours}{name}.bias"]
        for name, hf_name in norms.items():
            out[f"{theirs}{hf_name}.weight"] = state[f"{ours}{name}.weight"]
            out[f"{theirs}{hf_name}.bias"] = state[f"{ours}{name}.bias"]
    return out


def export_gpt(state: Mapping[str, Tensor], config: ModelConfig, directory: Path) -> None:
    """Write the built-in GPT with weights `state` (its state_dict) and the byte tokenizer
    to `directory` as a Hugging Face model."""
    from transformers import GPT2LMHeadModel

    quiet_transformers()
    model = GPT2LMHeadModel(gpt2_config(config))
    weights = {
        k: v.detach().to("cpu", torch.float32) for k, v in gpt_to_gpt2_state(state, config).items()
    }
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # The head is tied to wte; transformers may list it (and GPT-2's causal-mask buffers) as
    # missing, and nothing else.
    left = [k for k in missing if k != "lm_head.weight" and not k.endswith(".attn.bias")]
    if left or unexpected:
        raise ValueError(
            f"GPT -> GPT-2 weight mapping incomplete: missing {left}, unexpected {unexpected}"
        )
    model.tie_weights()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    byte_tokenizer(directory)


def byte_tokenizer(directory: Path) -> None:
    """`ByteTokenizer` as a Hugging Face tokenizer in `directory`: byte-level BPE with no
    merges, byte b is id b (through GPT-2's byte-to-unicode table), then the specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = _bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)} | BYTE_SPECIAL_IDS
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKEN_ROLES)
    wrapped.save_pretrained(directory)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters, the alphabet of every
    byte-level BPE (`tokenizers`' ByteLevel uses the same)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes, strict=True)}
