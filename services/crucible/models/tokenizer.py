"""A byte-level tokenizer: ids 0-255 are bytes, then a few special tokens. No downloads."""

from collections.abc import Sequence
from typing import Protocol


class Tokenizer(Protocol):
    """What the workloads ask of a tokenizer: this module's `ByteTokenizer`, or a Hugging
    Face tokenizer (`hf_tokenizer.HFTokenizer`)."""

    BOS: int
    EOS: int
    PAD: int
    vocab_size: int

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens, plus BOS, EOS and PAD."""

    BOS = 256
    EOS = 257
    PAD = 258
    vocab_size = 259

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        tokens = list(text.encode("utf-8"))
        if bos:
            tokens.insert(0, self.BOS)
        if eos:
            tokens.append(self.EOS)
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the byte tokens; special and out-of-vocabulary ids are dropped.

        A model may emit bytes that are not valid UTF-8; those decode to U+FFFD rather
        than raising, because a wrong answer must be scored, not crash the rollout.
        """
        return bytes(t for t in tokens if 0 <= t < 256).decode("utf-8", errors="replace")
