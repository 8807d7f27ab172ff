"""Train a byte-level BPE tokenizer on a dataset's text with the `tokenizers` library.

The result is a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json,
special_tokens_map.json, and the chat template), readable by `HFTokenizer.from_directory` and
by transformers. Byte
level, so every string encodes (no unknown token); training is deterministic for the same
texts in the same order and the same settings.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>")
"""Ids 0, 1 and 2 of every tokenizer trained here."""

SPECIAL_TOKEN_ROLES = dict(
    zip(("pad_token", "bos_token", "eos_token"), SPECIAL_TOKENS, strict=True)
)
"""The special tokens by the role transformers gives them (PreTrainedTokenizerFast's
arguments); the exported byte tokenizer names its specials the same way."""


def train_bpe(
    texts: Iterable[str], directory: Path, *, vocab_size: int, min_frequency: int = 2
) -> int:
    """Train on `texts` and write the tokenizer to `directory`; returns its vocabulary size
    (at most `vocab_size`: a small corpus runs out of merges first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from crucible.models.chat import DEFAULT_CHAT_TEMPLATE

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    smallest = len(SPECIAL_TOKENS) + len(alphabet)
    if vocab_size < smallest:
        raise ValueError(
            f"vocab_size={vocab_size} is below the {smallest} ids every byte-level BPE needs "
            f"({len(alphabet)} bytes and {len(SPECIAL_TOKENS)} special tokens)"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKEN_ROLES)
    # Chats render as the training data's default layout did (`chat.py`), here and in
    # transformers.
    wrapped.chat_template = DEFAULT_CHAT_TEMPLATE
    directory.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(directory)
    return int(tokenizer.get_vocab_size())
