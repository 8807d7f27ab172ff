"""The three shapes of training record and how each becomes examples.

- text: `{"text": ...}`, pre-training: every token is trained; a document longer than a
  row is cut into row-sized pieces that overlap by one token, so every token is predicted
  exactly once.
- prompt_completion: `{"prompt": ..., "completion": ...}`, SFT on the completion; one
  longer than a row is cut at the row's end.
- chat: `{"messages": [{"role": ..., "content": ...}, ...]}`, SFT on the assistant's turns
  (`encode_chat`); cut at the row's end like prompt_completion.

`record_check(shape)` is what the streaming reader runs on every record before training,
so a record without its fields fails at the start, naming the file, record and field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from crucible.models.chat import Message, tokenize_chat
from crucible.models.tokenizer import Tokenizer
from crucible.training.data import Example, encode_sft
from crucible.training.records import DataError, Record, RecordCheck
from crucible.training.shape_of import AUTO, SHAPES


def encode_chat(tokenizer: Tokenizer, messages: Sequence[Message]) -> Example:
    """The conversation as one example; its trained tokens are the assistant's turns."""
    chat = tokenize_chat(tokenizer, messages)
    first_trained = chat.trained.index(True) if True in chat.trained else len(chat.tokens)
    return Example(tokens=chat.tokens, prompt_len=first_trained, trained=chat.trained)


def record_check(shape: str) -> RecordCheck:
    checks: dict[str, RecordCheck] = {
        "text": lambda record, where: _string_field(record, where, "text"),
        "prompt_completion": _check_prompt_completion,
        "chat": _check_chat,
    }
    if shape not in checks:
        raise DataError(f"data.shape must be one of {', '.join((AUTO, *SHAPES))}: {shape!r}")
    return checks[shape]


def encoder(
    shape: str, tokenizer: Tokenizer, *, max_targets: int
) -> Callable[[Record], list[Example]]:
    """record -> the examples it trains on, none longer than `max_targets` positions."""
    if shape == "text":
        return lambda record: split_text(tokenizer, record["text"], max_targets)
    if shape == "prompt_completion":
        return lambda record: _cut(
            encode_sft(tokenizer, record["prompt"], record["completion"]), max_targets
        )
    return lambda record: _cut(encode_chat(tokenizer, record["messages"]), max_targets)


def texts_of(shape: str, record: Record) -> list[str]:
    """The text of a record (what a tokenizer is trained on): its text; its prompt and
    completion; its messages' contents."""
    if shape == "text":
        return [record["text"]]
    if shape == "prompt_completion":
        return [record["prompt"], record["completion"]]
    return [message["content"] for message in record["messages"]]


def split_text(tokenizer: Tokenizer, text: str, max_targets: int) -> list[Example]:
    tokens = tokenizer.encode(text, bos=True, eos=True)
    pieces = []
    for start in range(0, max(len(tokens) - 1, 1), max_targets):
        piece = tokens[start : start + max_targets + 1]
        if len(piece) > 1:
            pieces.append(Example(tokens=piece, prompt_len=1))
    return pieces


def _cut(example: Example, max_targets: int) -> list[Example]:
    """The example, cut to `max_targets` positions; none when nothing trained is left."""
    if example.num_targets > max_targets:
        keep = max_targets + 1
        trained = example.trained[:keep] if example.trained is not None else None
        example = replace(example, tokens=example.tokens[:keep], trained=trained)
    if not any(example.target_mask()):
        return []
    return [example]


def _string_field(record: Record, where: str, name: str) -> None:
    if name not in record:
        raise DataError(f"{where} has no {name!r} field")
    if not isinstance(record[name], str):
        raise DataError(
            f"{where}: field {name!r} must be a string, not {type(record[name]).__name__}"
        )


def _check_prompt_completion(record: Record, where: str) -> None:
    _string_field(record, where, "prompt")
    _string_field(record, where, "completion")


def _check_chat(record: Record, where: str) -> None:
    messages: Any = record.get("messages")
    if messages is None:
        raise DataError(f"{where} has no 'messages' field")
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: field 'messages' must be a non-empty list of messages")
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise DataError(f"{where}: message {number} is not an object")
        _string_field(message, f"{where} message {number}", "role")
        _string_field(message, f"{where} message {number}", "content")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no message has role 'assistant', so nothing would be trained")
