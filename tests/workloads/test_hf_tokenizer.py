"""Tokenizers other than the bytes: a byte-level BPE trained on text (models/bpe.py) and
read back as the workloads read any Hugging Face tokenizer directory (hf_tokenizer.py)."""

from pathlib import Path

import pytest

from crucible.models.bpe import SPECIAL_TOKENS, train_bpe
from crucible.models.hf_tokenizer import HFTokenizer, TokenizerError

TEXTS = [f"{a}+{b}={a + b}" for a in range(60) for b in range(60)]


def test_a_trained_tokenizer_round_trips_text_and_names_its_special_tokens(
    tmp_path: Path,
) -> None:
    size = train_bpe(TEXTS, tmp_path, vocab_size=400)
    assert 259 < size <= 400
    tok = HFTokenizer.from_directory(tmp_path)
    assert (tok.PAD, tok.BOS, tok.EOS) == (0, 1, 2) and tok.vocab_size == size
    ids = tok.encode("17+25=42", bos=True, eos=True)
    assert ids[0] == tok.BOS and ids[-1] == tok.EOS
    assert len(ids) - 2 < len("17+25=42")  # merges learned from the data
    assert tok.decode(ids) == "17+25=42"
    assert tok.decode([*tok.encode("héllo ✓"), 10**6]) == "héllo ✓"  # bytes; bad ids dropped


def test_training_is_deterministic(tmp_path: Path) -> None:
    train_bpe(TEXTS, tmp_path / "a", vocab_size=300)
    train_bpe(TEXTS, tmp_path / "b", vocab_size=300)
    a, b = ((tmp_path / d / "tokenizer.json").read_bytes() for d in "ab")
    assert a == b


def test_too_small_a_vocabulary_and_a_missing_tokenizer_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size=100 is below the 259 ids"):
        train_bpe(TEXTS, tmp_path, vocab_size=100)
    with pytest.raises(TokenizerError, match=f"no tokenizer in {tmp_path}"):
        HFTokenizer.from_directory(tmp_path)


def test_a_tokenizer_larger_than_the_models_embedding_is_refused(tmp_path: Path) -> None:
    train_bpe(TEXTS, tmp_path, vocab_size=300)
    tok = HFTokenizer.from_directory(tmp_path)
    tok.check_fits(tok.vocab_size, model="m")
    with pytest.raises(TokenizerError, match=f"has {tok.vocab_size} tokens but model m embeds"):
        tok.check_fits(tok.vocab_size - 1, model="m")
    assert SPECIAL_TOKENS[0] == "<|pad|>"
