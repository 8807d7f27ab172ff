"""The prompts a rollout samples from: records of a prompts dataset or of an environment, each
with a "prompt" (text) or "messages" (a chat: a list of {role, content}), and the rest of the
record its metadata.

A chat is rendered with the model's chat template and the header of the assistant's reply
(`chat.render_chat_prompt`): the model continues those tokens, and the reward sees that text
as the prompt. The metadata is the record without its "prompt" field, so a chat's "messages"
stay in it: a reward reads the conversation as given instead of parsing the template's text.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crucible.models.tokenizer import Tokenizer

log = logging.getLogger(__name__)

FIELDS = ("prompt", "messages")
"""A prompts record has exactly one of these."""


@dataclass(frozen=True)
class Prompt:
    text: str
    """What the reward sees and the trajectory records: the prompt, or the rendered chat."""

    tokens: list[int]
    """What the model continues (BOS included)."""

    metadata: dict[str, Any]
    """The record without its "prompt" field."""


def record_problem(record: Any, where: str) -> str | None:
    """What is wrong with a prompts record (`where`: it, in the sentence), or None."""
    if not isinstance(record, Mapping):
        return f"{where} is a {type(record).__name__}, not an object"
    given = [name for name in FIELDS if name in record]
    if not given:
        return (
            f"{where} has neither a 'prompt' nor a 'messages' field; its fields: "
            f"{', '.join(sorted(map(str, record))) or 'none'}"
        )
    if len(given) == 2:
        return f"{where} has both a 'prompt' and a 'messages' field; give one"
    if "prompt" in record:
        return _not_a_string(record, where, "prompt")
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        return f"{where}: field 'messages' must be a non-empty list of {{role, content}}"
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, Mapping):
            return f"{where} message {number} is not an object"
        for name in ("role", "content"):
            if problem := _not_a_string(message, f"{where} message {number}", name):
                return problem
    return None


def _not_a_string(record: Mapping[str, Any], where: str, name: str) -> str | None:
    if name not in record:
        return f"{where} has no {name!r} field"
    if not isinstance(record[name], str):
        return f"{where}: field {name!r} must be a string, not {type(record[name]).__name__}"
    return None


def build_prompts(records: Sequence[Mapping[str, Any]], tokenizer: Tokenizer) -> list[Prompt]:
    """The prompts of checked records (`record_problem` found nothing wrong with them)."""
    from crucible.models.chat import render_chat_prompt  # imports torch

    prompts = []
    chats = differ = 0
    for record in records:
        metadata = {k: v for k, v in record.items() if k != "prompt"}
        if "prompt" in record:
            text = record["prompt"]
            prompts.append(Prompt(text, tokenizer.encode(text, bos=True), metadata))
            continue
        text, tokens = render_chat_prompt(tokenizer, record["messages"])
        prompts.append(Prompt(text, tokens, metadata))
        chats += 1
        # An RL run encodes each trajectory's prompt text again (a BOS, then the text, any
        # special token written in it kept as text): where the template writes special
        # tokens (a Hugging Face model's own, an EOS after an assistant turn), that gives
        # other tokens than the ones sampled from.
        differ += tokenizer.encode(text, bos=True) != tokens
    if differ:
        log.warning(
            "%d of %d chat prompts do not encode back from their text to the tokens sampled "
            "from (the chat template writes special tokens); an RL run on these trajectories "
            "would train on other prompt tokens",
            differ,
            chats,
        )
    return prompts
