"""A Hugging Face tokenizer behind the interface of `ByteTokenizer`: `encode(text, bos=,
eos=)`, `decode(ids)`, and the `BOS`, `EOS`, `PAD` ids and `vocab_size` the workloads use.

The tokenizer is read from a directory (tokenizer.json and its config, as
`save_pretrained` writes them, or a bare tokenizer.json from the `tokenizers` library),
never downloaded. A tokenizer without a padding token pads with its end-of-sequence token:
the loss masks and the generators know each sequence's length, so padding is never read as
a token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crucible.models.bpe import SPECIAL_TOKEN_ROLES


class TokenizerError(ValueError):
    """A tokenizer directory that cannot be used; the message names it and what is missing."""


class HFTokenizer:
    def __init__(self, inner: Any, *, where: str) -> None:
        self.inner = inner
        self.vocab_size: int = len(inner)
        eos = inner.eos_token_id
        if eos is None:
            raise TokenizerError(f"tokenizer at {where} has no end-of-sequence token (eos_token)")
        self.EOS: int = int(eos)
        self.BOS: int = int(inner.bos_token_id) if inner.bos_token_id is not None else self.EOS
        self.PAD: int = int(inner.pad_token_id) if inner.pad_token_id is not None else self.EOS
        self.where = where

    @classmethod
    def from_directory(cls, directory: Path | str) -> HFTokenizer:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast

        directory = Path(directory)
        if (directory / "tokenizer_config.json").is_file():
            inner = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        elif (directory / "tokenizer.json").is_file():
            # A bare `tokenizers` file: its special tokens by the names bpe.py gives them.
            inner = PreTrainedTokenizerFast(
                tokenizer_file=str(directory / "tokenizer.json"), **SPECIAL_TOKEN_ROLES
            )
        else:
            raise TokenizerError(
                f"no tokenizer in {directory}: expected tokenizer.json "
                "(and tokenizer_config.json, as save_pretrained writes them)"
            )
        return cls(inner, where=str(directory))

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        # Special tokens written in the text stay text: data cannot inject an EOS or BOS.
        tokens: list[int] = self.inner.encode(
            text, add_special_tokens=False, split_special_tokens=True
        )
        if bos:
            tokens.insert(0, self.BOS)
        if eos:
            tokens.append(self.EOS)
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the tokens; special tokens and ids outside the vocabulary are dropped (a
        wrong answer must be scored, not crash the rollout)."""
        ids = [t for t in tokens if 0 <= t < self.vocab_size]
        return str(self.inner.decode(ids, skip_special_tokens=True))

    def check_fits(self, vocab_size: int, *, model: str) -> None:
        """Refuse a tokenizer whose ids a model of `vocab_size` embedding rows cannot take."""
        if self.vocab_size > vocab_size:
            raise TokenizerError(
                f"tokenizer at {self.where} has {self.vocab_size} tokens but model {model} "
                f"embeds only {vocab_size}"
            )
