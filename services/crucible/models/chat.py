"""Chat messages to tokens, with the loss on the assistant's turns only.

A conversation is rendered with a chat template: the tokenizer's own (a Hugging Face
model's), else `DEFAULT_CHAT_TEMPLATE`. Each assistant turn is the text the template adds
for that message, found by rendering the conversation up to it with the generation prompt
and then with the turn, so the mask follows whatever the template writes around a message
(the turn's end token included, which is what teaches the model to stop).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from crucible.models.tokenizer import Tokenizer

Message = dict[str, Any]
Render = Callable[[Sequence[Message], bool], str]
"""(messages, add_generation_prompt) -> the template's text."""
TextToIds = Callable[[str], list[int]]

DEFAULT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
"""The chat layout of tokenizers that bring no template (the byte tokenizer, a BPE trained
here), as Jinja; `train_bpe` writes it into the tokenizers it trains, so an exported model
renders chats as it was trained on them."""

_BOS_MARK, _EOS_MARK = "\ue000", "\ue001"
"""Stand-ins for BOS and EOS in the default template's text (private-use characters), so
that the tokenizer's real ids go in their place and no text can spell them."""


class ChatError(ValueError):
    """A conversation, or a chat template, that cannot be turned into training tokens."""


@dataclass(frozen=True)
class ChatTokens:
    tokens: list[int]
    trained: list[bool]
    """Per token: whether it is the assistant's (the loss is on these)."""


def tokenize_chat(tokenizer: Tokenizer, messages: Sequence[Message]) -> ChatTokens:
    """The conversation's tokens; the trained ones are the assistant's turns."""
    render, ids = _template(tokenizer)
    tokens: list[int] = []
    trained: list[bool] = []
    done = ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(messages[:index], True)
        after = render(messages[: index + 1], False)
        if not (before.startswith(done) and after.startswith(before)):
            raise ChatError(
                f"the chat template of {getattr(tokenizer, 'where', 'the tokenizer')} does not "
                f"render message {index + 1} as a continuation of the messages before it, so "
                "the assistant's turn cannot be found; give the tokenizer a template that does"
            )
        for text, is_trained in ((before[len(done) :], False), (after[len(before) :], True)):
            piece = ids(text)
            tokens += piece
            trained += [is_trained] * len(piece)
        done = after
    rest = ids(render(messages, False)[len(done) :])
    tokens += rest
    trained += [False] * len(rest)
    return ChatTokens(tokens=tokens, trained=trained)


def encode_chat_prompt(tokenizer: Tokenizer, messages: Sequence[Message]) -> list[int]:
    """The conversation so far and the header of the assistant's reply: what a generator
    continues."""
    render, ids = _template(tokenizer)
    return ids(render(messages, True))


def render_chat_prompt(tokenizer: Tokenizer, messages: Sequence[Message]) -> tuple[str, list[int]]:
    """`encode_chat_prompt`'s tokens and the text they were rendered from: the template's
    text, without the default template's BOS and EOS (tokens, not text); a tokenizer's own
    template writes its special tokens in the text, as transformers renders them."""
    render, ids = _template(tokenizer)
    text = render(messages, True)
    return text.replace(_BOS_MARK, "").replace(_EOS_MARK, ""), ids(text)


def _template(tokenizer: Tokenizer) -> tuple[Render, TextToIds]:
    inner: Any = getattr(tokenizer, "inner", None)
    own = getattr(inner, "chat_template", None)
    if isinstance(own, str):

        def render_own(messages: Sequence[Message], generation_prompt: bool) -> str:
            return str(
                inner.apply_chat_template(
                    list(messages), tokenize=False, add_generation_prompt=generation_prompt
                )
            )

        # The template's own special tokens (<|im_start|>, ...) are parsed as such.
        return render_own, lambda text: list(inner.encode(text, add_special_tokens=False))

    template = _default_template()

    def render_default(messages: Sequence[Message], generation_prompt: bool) -> str:
        return str(
            template.render(
                messages=list(messages),
                add_generation_prompt=generation_prompt,
                bos_token=_BOS_MARK,
                eos_token=_EOS_MARK,
            )
        )

    special = {_BOS_MARK: tokenizer.BOS, _EOS_MARK: tokenizer.EOS}

    def default_ids(text: str) -> list[int]:
        out: list[int] = []
        for part in re.split(f"({_BOS_MARK}|{_EOS_MARK})", text):
            out += [special[part]] if part in special else tokenizer.encode(part) if part else []
        return out

    return render_default, default_ids


@cache
def _default_template() -> Any:
    # As transformers compiles chat templates: sandboxed, blocks trimmed.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(DEFAULT_CHAT_TEMPLATE)
