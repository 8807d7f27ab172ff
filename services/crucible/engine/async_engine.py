"""The engine in a thread of its own, fed from asyncio: what the HTTP server talks to.

The engine thread owns the engine: requests and aborts reach it through a queue and are
applied between steps, and each step's tokens go back to the asyncio loop, to one queue per
request. A caller iterates its request's `Delta`s; leaving the iteration early (a client
that disconnected) aborts the request, which frees its blocks at the next step.
"""

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

from crucible.config.sampling import SamplingParams
from crucible.engine.engine import Engine, EngineStats
from crucible.engine.sequence import FinishReason, TokenLogprob

log = logging.getLogger("crucible.engine")


@dataclass(frozen=True)
class Delta:
    """One new token of one of the request's completions."""

    index: int
    token: TokenLogprob
    finish_reason: FinishReason | None
    text_end: int | None = None
    """On the last delta of a completion a stop string ended: the characters of the
    completion's decoded text to keep."""


class EngineStopped(RuntimeError):
    """The engine thread is not running (it failed, or the server is shutting down)."""


@dataclass
class _Add:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    deltas: "asyncio.Queue[Delta | BaseException | None]"
    loop: asyncio.AbstractEventLoop


@dataclass
class _Abort:
    request_id: str


class AsyncEngine:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._commands: queue.SimpleQueue[_Add | _Abort | None] = queue.SimpleQueue()
        self._streams: dict[str, _Add] = {}
        self._thread = threading.Thread(target=self._run, name="crucible-engine", daemon=True)
        self._failure: BaseException | None = None
        self._stopping = False
        self._counter = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._commands.put(None)
        self._thread.join(timeout=30)

    @property
    def healthy(self) -> bool:
        return self._thread.is_alive() and self._failure is None

    def stats(self) -> EngineStats:
        return self.engine.stats()

    @property
    def max_sequence_tokens(self) -> int:
        """The most tokens, prompt plus completion, one request's sequences may have."""
        return self.engine.max_sequence_tokens

    def check(self, prompt: Sequence[int], params: SamplingParams) -> None:
        """Raise `InvalidParameter` now for a request the engine would refuse."""
        self.engine.check(prompt, params)

    async def generate(
        self, prompt: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[Delta, None]:
        """The request's tokens as they come, every completion interleaved, until all
        `params.n` have finished. Closing the generator before the end (`aclose`, or a
        cancelled task iterating it) aborts the request."""
        if not self.healthy:
            raise EngineStopped("the engine is not running") from self._failure
        # Here, not in the engine thread, where a refusal would stop the engine.
        self.check(prompt, params)
        self._counter += 1
        request_id = f"req-{self._counter}"
        deltas: asyncio.Queue[Delta | BaseException | None] = asyncio.Queue()
        self._commands.put(
            _Add(request_id, list(prompt), params, deltas, asyncio.get_running_loop())
        )
        done = False
        try:
            while True:
                item = await deltas.get()
                if item is None:
                    done = True
                    return
                if isinstance(item, BaseException):
                    done = True
                    raise EngineStopped("the engine failed") from item
                yield item
        finally:
            if not done:
                self._commands.put(_Abort(request_id))

    # -- the engine thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._apply_commands(block=not self.engine.has_work)
                if self.engine.has_work:
                    self._step()
        except BaseException as exc:  # every waiting client must hear of it
            log.exception("engine step failed")
            self._failure = exc
            for stream in self._streams.values():
                stream.loop.call_soon_threadsafe(stream.deltas.put_nowait, exc)
            self._streams.clear()

    def _apply_commands(self, *, block: bool) -> None:
        while True:
            try:
                command = self._commands.get(block=block)
            except queue.Empty:
                return
            block = False
            if command is None:
                return
            if isinstance(command, _Abort):
                if self._streams.pop(command.request_id, None) is not None:
                    self.engine.abort(command.request_id)
                continue
            self.engine.add_request(command.prompt, command.params, command.request_id)
            self._streams[command.request_id] = command

    def _step(self) -> None:
        finished: set[str] = set()
        for progress in self.engine.step():
            seq = progress.seq
            stream = self._streams.get(seq.request_id)
            if stream is None:
                continue
            delta = Delta(seq.index, seq.logprobs[-1], seq.finish_reason, seq.text_end)
            stream.loop.call_soon_threadsafe(stream.deltas.put_nowait, delta)
            if progress.finished:
                finished.add(seq.request_id)
        for request_id in finished:
            output = self.engine.output(request_id)
            if output.finished:
                self.engine.release(request_id)
                stream = self._streams.pop(request_id)
                stream.loop.call_soon_threadsafe(stream.deltas.put_nowait, None)
