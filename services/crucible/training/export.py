"""Checkpoints as Hugging Face model directories: config.json, model.safetensors and the
tokenizer, loadable by transformers (and by `model: {hf: {path: ...}}`) without Crucible.

The built-in GPT is GPT-2's architecture (pre-norm blocks, fused QKV, tanh-GELU MLP,
learned positions, tied embeddings, LayerNorm eps 1e-5), so it exports as a
`GPT2LMHeadModel` whose logits equal the GPT's; its byte tokenizer exports as a byte-level
BPE without merges whose ids are the bytes themselves, then BOS, EOS and PAD, and a Hugging
Face tokenizer it was trained with as that tokenizer's own files. A Hugging Face model
exports as itself with the tokenizer it was trained with. Weights are written in float32
on CPU, from a copy: the model exported keeps its device and dtype.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from crucible.config.workload import ModelConfig
from crucible.models.bpe import SPECIAL_TOKEN_ROLES
from crucible.models.gpt import GPT
from crucible.models.hf import LanguageModel, quiet_transformers
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.models.tokenizer import ByteTokenizer, Tokenizer

BYTE_SPECIAL_IDS = {
    SPECIAL_TOKEN_ROLES["bos_token"]: ByteTokenizer.BOS,
    SPECIAL_TOKEN_ROLES["eos_token"]: ByteTokenizer.EOS,
    SPECIAL_TOKEN_ROLES["pad_token"]: ByteTokenizer.PAD,
}


def export_model(model: LanguageModel, tokenizer: Tokenizer, directory: Path) -> None:
    """Write `model` and the tokenizer it was trained with to `directory` as a Hugging Face
    model (the GPT as GPT-2, a Hugging Face model as itself), weights in float32 on CPU;
    `model` is left on its device and in its dtype."""
    if isinstance(model, GPT):
        export_gpt(model.state_dict(), model.config, directory, tokenizer)
        return
    quiet_transformers()
    directory.mkdir(parents=True, exist_ok=True)
    # The tokenizer first: one that cannot be written is refused before any weights are.
    _export_tokenizer(tokenizer, directory)
    _cpu_float32_copy(model.inner).save_pretrained(  # type: ignore[operator]
        directory, safe_serialization=True
    )


def gpt2_config(config: ModelConfig, tokenizer: Tokenizer | None = None) -> Any:
    """The transformers GPT-2 config of the built-in GPT's shape (no dropout: the GPT has
    none), naming `tokenizer`'s special ids (the byte tokenizer's by default)."""
    from transformers import GPT2Config

    tok = ByteTokenizer() if tokenizer is None else tokenizer
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


def export_gpt(
    state: Mapping[str, Tensor],
    config: ModelConfig,
    directory: Path,
    tokenizer: Tokenizer | None = None,
) -> None:
    """Write the built-in GPT with weights `state` (its state_dict) and `tokenizer` (the
    byte tokenizer by default) to `directory` as a Hugging Face model."""
    from transformers import GPT2LMHeadModel

    quiet_transformers()
    tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
    model = GPT2LMHeadModel(gpt2_config(config, tokenizer))
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
    # The tokenizer first: one that cannot be written is refused before any weights are.
    _export_tokenizer(tokenizer, directory)
    model.save_pretrained(directory, safe_serialization=True)


def _export_tokenizer(tokenizer: Tokenizer, directory: Path) -> None:
    """`tokenizer`'s Hugging Face files in `directory`, as `HFTokenizer.from_directory` reads
    them back."""
    if isinstance(tokenizer, ByteTokenizer):
        byte_tokenizer(directory)
    elif isinstance(tokenizer, HFTokenizer):
        tokenizer.inner.save_pretrained(directory)
    else:
        raise ValueError(
            f"cannot export a tokenizer of type {type(tokenizer).__name__}: "
            "only ByteTokenizer and HFTokenizer have Hugging Face files"
        )


def _cpu_float32_copy(module: nn.Module) -> nn.Module:
    """A copy of `module` whose floating-point weights are float32 on CPU. The weights are
    seeded into deepcopy's memo so that they are copied once, to CPU (a plain deepcopy would
    clone each on the module's own device first), and tied weights stay tied."""
    memo: dict[int, Any] = {}
    for param in module.parameters():
        memo[id(param)] = nn.Parameter(_cpu_float32(param), requires_grad=param.requires_grad)
    for buffer in module.buffers():
        memo[id(buffer)] = _cpu_float32(buffer)
    return copy.deepcopy(module, memo)


def _cpu_float32(tensor: Tensor) -> Tensor:
    dtype = torch.float32 if tensor.is_floating_point() else tensor.dtype
    return tensor.detach().to("cpu", dtype)


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
