"""A completion's token logprobs in OpenAI's two formats: the legacy completions API's
(parallel lists of token texts, logprobs, alternatives and text offsets) and chat's (one
entry per token, with its bytes)."""

from collections.abc import Callable, Sequence
from functools import lru_cache

from crucible.engine.sequence import TokenLogprob
from crucible.models.tokenizer import Tokenizer
from crucible.serving.openai.protocol import (
    ChatLogprob,
    ChatLogprobs,
    CompletionLogprobs,
    TopLogprob,
)


class LogprobFormatter:
    def __init__(self, tokenizer: Tokenizer) -> None:
        # The text of one token: the same few thousand ids again and again.
        self.token_text: Callable[[int], str] = lru_cache(maxsize=1 << 16)(
            lambda token: tokenizer.decode([token])
        )

    def completion(self, logprobs: Sequence[TokenLogprob], start: int) -> CompletionLogprobs:
        """The legacy format, for a completion's tokens from `start` on."""
        texts = [self.token_text(logprob.token) for logprob in logprobs]
        # Offsets count token texts, as vLLM does: a byte of a multi-byte character has a
        # text of its own (U+FFFD) that the decoded completion does not.
        offset = sum(len(text) for text in texts[:start])
        tokens, offsets, tops = [], [], []
        for text, logprob in zip(texts[start:], logprobs[start:], strict=True):
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            top = {self.token_text(token): value for token, value in logprob.top}
            top.setdefault(text, logprob.logprob)
            tops.append(top)
        return CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[logprob.logprob for logprob in logprobs[start:]],
            top_logprobs=tops,
            text_offset=offsets,
        )

    def chat(self, logprobs: Sequence[TokenLogprob]) -> ChatLogprobs:
        return ChatLogprobs(content=[self._chat_entry(logprob) for logprob in logprobs])

    def _chat_entry(self, logprob: TokenLogprob) -> ChatLogprob:
        text = self.token_text(logprob.token)
        return ChatLogprob(
            token=text,
            logprob=logprob.logprob,
            bytes=list(text.encode()),
            top_logprobs=[
                TopLogprob(token=alt, logprob=value, bytes=list(alt.encode()))
                for alt, value in ((self.token_text(t), v) for t, v in logprob.top)
            ],
        )
