"""One API request's engine requests, one per prompt, and the choices they grow.

The engine's `Delta`s of every prompt come merged, as they arrive, and each goes to its
choice. A streamed choice sends the text its tokens decode to, less what later tokens could
still change: a trailing U+FFFD (a character whose bytes have not all come) and a tail that
could be the start of a stop string.
"""

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from crucible.config.sampling import SamplingParams
from crucible.engine.async_engine import AsyncEngine, Delta
from crucible.engine.sequence import TokenLogprob
from crucible.models.tokenizer import Tokenizer
from crucible.serving.openai.metrics import RequestTimer
from crucible.serving.openai.protocol import Usage

INCOMPLETE_CHARACTER = "\ufffd"
"""What a decoder writes for bytes that do not (yet) make a character."""


@dataclass
class Choice:
    """One completion of the response as its tokens arrive."""

    index: int
    """Its index among the response's choices: prompt by prompt, `n` each."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    text_end: int | None = None
    """Where a stop string cut the decoded text."""

    streamed_chars: int = 0
    streamed_tokens: int = 0

    def add(self, delta: Delta) -> None:
        self.tokens.append(delta.token.token)
        self.logprobs.append(delta.token)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason.value
            self.text_end = delta.text_end

    def text(self, tokenizer: Tokenizer) -> str:
        text = tokenizer.decode(self.tokens)
        return text if self.text_end is None else text[: self.text_end]

    def take(self, tokenizer: Tokenizer, stops: Sequence[str]) -> tuple[str, int] | None:
        """For the next chunk: the text not streamed yet that no later token can change,
        and the first of the tokens it carries; None when there is nothing to send."""
        finished = self.finish_reason is not None
        ready = (
            self.text(tokenizer) if finished else settled_text(tokenizer.decode(self.tokens), stops)
        )
        if len(ready) <= self.streamed_chars and not finished:
            return None
        text = ready[self.streamed_chars :]
        start = self.streamed_tokens
        self.streamed_chars = max(self.streamed_chars, len(ready))
        self.streamed_tokens = len(self.tokens)
        return text, start


def settled_text(text: str, stops: Sequence[str]) -> str:
    """The part of a growing completion's text that more tokens cannot change: without a
    trailing U+FFFD (the rest of its bytes may come) and without a tail that could be the
    start of a stop string (the engine cuts the text there if the rest comes)."""
    text = text.rstrip(INCOMPLETE_CHARACTER)
    held = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:length]):
                held = length
                break
    return text[: len(text) - held]


class Generation:
    """One API request's engine requests (one per prompt) and the choices they grow."""

    def __init__(
        self,
        engine: AsyncEngine,
        prompts: list[list[int]],
        params: SamplingParams,
        timer: RequestTimer,
    ) -> None:
        self.engine = engine
        self.prompts = prompts
        self.params = params
        self.timer = timer
        self.choices = [
            Choice(index=p * params.n + i, prompt=prompt)
            for p, prompt in enumerate(prompts)
            for i in range(params.n)
        ]

    async def updates(self) -> AsyncGenerator[Choice, None]:
        """Each choice as a token reaches it, until all have finished; leaving early (a
        client that went away) aborts the engine requests."""
        try:
            async with contextlib.aclosing(
                merged_deltas(self.engine, self.prompts, self.params)
            ) as deltas:
                async for prompt, delta in deltas:
                    choice = self.choices[prompt * self.params.n + delta.index]
                    choice.add(delta)
                    self.timer.token(choice.index)
                    yield choice
        finally:
            self.timer.finished([choice.finish_reason for choice in self.choices])

    async def run(self) -> None:
        async with contextlib.aclosing(self.updates()) as updates:
            async for _ in updates:
                pass

    @property
    def usage(self) -> Usage:
        prompt = sum(len(p) for p in self.prompts)
        completion = sum(len(c.tokens) for c in self.choices)
        return Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )


async def merged_deltas(
    engine: AsyncEngine, prompts: list[list[int]], params: SamplingParams
) -> AsyncGenerator[tuple[int, Delta], None]:
    """(prompt index, delta) of one engine request per prompt, as they come. Closing this
    cancels the requests' tasks, and a cancelled `engine.generate` aborts its request."""
    queue: asyncio.Queue[tuple[int, Delta] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, prompt: list[int]) -> None:
        try:
            async with contextlib.aclosing(engine.generate(prompt, params)) as deltas:
                async for delta in deltas:
                    queue.put_nowait((index, delta))
        except Exception as exc:  # raised to the reader, below
            queue.put_nowait(exc)
        else:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(i, prompt)) for i, prompt in enumerate(prompts)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
