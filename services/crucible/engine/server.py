"""An OpenAI-compatible HTTP API over `AsyncEngine`: /v1/completions, /v1/chat/completions
and /v1/models behind API keys, and the open /health and /metrics (probes and scrapers).

Bad input is a 400 in OpenAI's error shape with `param` naming the field, never a 500. A
streamed choice sends the text its tokens decode to, less what later tokens could still
change: a trailing U+FFFD (a character whose bytes have not all come) and a tail that could
be the start of a stop string. A client that goes away mid-request aborts it, which frees
its KV blocks.
"""

import asyncio
import contextlib
import hmac
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException

from crucible.engine.async_engine import AsyncEngine, Delta, EngineStopped
from crucible.engine.metrics import EngineMetrics, RequestTimer
from crucible.engine.openai_schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprob,
    ChatLogprobs,
    ChatResponseMessage,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    ErrorDetail,
    ErrorResponse,
    ModelCard,
    ModelList,
    TopLogprob,
    Usage,
    chat_error,
    chat_sampling_params,
    completion_sampling_params,
)
from crucible.engine.params import InvalidParameter, SamplingParams
from crucible.engine.sequence import TokenLogprob
from crucible.workloads.chat import encode_chat_prompt
from crucible.workloads.tokenizer import Tokenizer

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before its answer (nginx's)."""

_INCOMPLETE = "\ufffd"
"""What a decoder writes for bytes that do not (yet) make a character."""


def create_engine_app(
    engine: AsyncEngine, *, model_name: str, tokenizer: Tokenizer, api_keys: Sequence[str]
) -> FastAPI:
    """The API over `engine`, which the app starts when it starts serving and stops at
    shutdown."""
    if not api_keys:
        raise ValueError("api_keys is empty; the engine's API needs at least one key")
    for position, key in enumerate(api_keys):
        if not key.strip():
            raise ValueError(f"api_keys[{position}] is blank; every API key must be non-empty")
    keys = [key.strip().encode() for key in api_keys]
    server = _Server(engine, model_name=model_name, tokenizer=tokenizer)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncGenerator[None, None]:
        engine.start()
        try:
            yield
        finally:
            # stop() joins the engine thread, which may be mid-step: wait off the loop.
            await asyncio.to_thread(engine.stop)

    app = FastAPI(
        title="Crucible engine", summary="OpenAI-compatible completions", lifespan=lifespan
    )
    app.add_exception_handler(_ApiError, _api_error)
    app.add_exception_handler(InvalidParameter, _invalid_parameter)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(EngineStopped, _engine_stopped)

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(_bearer(keys))])

    @v1.post(
        "/completions",
        operation_id="createCompletion",
        responses={200: {"model": CompletionResponse}, 400: {"model": ErrorResponse}},
    )
    async def completions(body: CompletionRequest, http: Request) -> Response:
        return await server.completions(body, http)

    @v1.post(
        "/chat/completions",
        operation_id="createChatCompletion",
        responses={200: {"model": ChatCompletionResponse}, 400: {"model": ErrorResponse}},
    )
    async def chat_completions(body: ChatCompletionRequest, http: Request) -> Response:
        return await server.chat(body, http)

    @v1.get("/models", operation_id="listModels")
    async def models() -> ModelList:
        return server.models()

    app.include_router(v1)

    @app.get("/health", operation_id="health")
    async def health() -> JSONResponse:
        if engine.healthy:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable"}, status_code=503)

    @app.get("/metrics", operation_id="prometheusMetrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(server.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


# -- requests ------------------------------------------------------------------------------


class _Server:
    """What the routes do, with the engine, the tokenizer and the metrics they share."""

    def __init__(self, engine: AsyncEngine, *, model_name: str, tokenizer: Tokenizer) -> None:
        self.engine = engine
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.metrics = EngineMetrics(engine)
        self.created = int(time.time())
        # The text of one token, for logprobs: the same few thousand ids again and again.
        self.token_text: Callable[[int], str] = lru_cache(maxsize=1 << 16)(
            lambda token: tokenizer.decode([token])
        )

    @property
    def capacity(self) -> int:
        """The longest prompt plus completion the engine takes: its context, or its whole
        KV cache when that is smaller."""
        inner = self.engine.engine
        return min(inner.max_seq_len, inner.pool.num_blocks * inner.pool.block_size)

    def models(self) -> ModelList:
        card = ModelCard(
            id=self.model_name,
            created=self.created,
            owned_by="crucible",
            max_model_len=self.capacity,
        )
        return ModelList(data=[card])

    async def completions(self, request: CompletionRequest, http: Request) -> Response:
        self._check_model(request.model)
        params = completion_sampling_params(request)
        prompts = self._completion_prompts(request.prompt)
        for prompt in prompts:
            self.engine.check(len(prompt), params)
        generation = self._start(prompts, params)
        head: dict[str, Any] = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if request.stream:
            return _event_stream(self._completion_chunks(request, generation, head))
        if not await _unless_client_leaves(http, generation.run()):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        choices = [
            CompletionChoice(
                index=choice.index,
                text=choice.text(self.tokenizer),
                logprobs=self._completion_logprobs(choice, 0)
                if request.logprobs is not None
                else None,
                finish_reason=choice.finish_reason,
                token_ids=choice.tokens if request.return_token_ids else None,
                prompt_token_ids=choice.prompt if request.return_token_ids else None,
            )
            for choice in generation.choices
        ]
        return _json(CompletionResponse(**head, choices=choices, usage=generation.usage))

    async def chat(self, request: ChatCompletionRequest, http: Request) -> Response:
        self._check_model(request.model)
        try:
            prompt = encode_chat_prompt(self.tokenizer, request.template_messages())
        except (ValueError, TemplateError) as exc:
            raise InvalidParameter("messages", f"cannot be rendered as a chat: {exc}") from None
        room = self.capacity - len(prompt)
        if room < 1:
            raise InvalidParameter(
                "messages",
                f"the conversation's {len(prompt)} tokens leave no room for a reply in the "
                f"model's context of {self.capacity} tokens",
            )
        params = chat_sampling_params(request, room=room)
        try:
            self.engine.check(len(prompt), params)
        except InvalidParameter as exc:
            raise chat_error(request, exc) from None
        generation = self._start([prompt], params)
        head: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if request.stream:
            return _event_stream(self._chat_chunks(request, generation, head))
        if not await _unless_client_leaves(http, generation.run()):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        choices = [
            ChatChoice(
                index=choice.index,
                message=ChatResponseMessage(content=choice.text(self.tokenizer)),
                logprobs=self._chat_logprobs(choice, 0) if request.logprobs else None,
                finish_reason=choice.finish_reason,
                token_ids=choice.tokens if request.return_token_ids else None,
            )
            for choice in generation.choices
        ]
        return _json(
            ChatCompletionResponse(
                **head,
                choices=choices,
                usage=generation.usage,
                prompt_token_ids=prompt if request.return_token_ids else None,
            )
        )

    def _check_model(self, model: str) -> None:
        if model != self.model_name:
            raise _ApiError(
                404,
                f"the model {model!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def _completion_prompts(self, prompt: str | list[str] | list[int]) -> list[list[int]]:
        if isinstance(prompt, str):
            texts = [prompt]
        elif all(isinstance(p, str) for p in prompt):
            texts = [str(p) for p in prompt]
        else:
            return [self._token_prompt([int(p) for p in prompt])]
        if not texts:
            raise InvalidParameter("prompt", "is an empty list; send a text or token ids")
        # BOS first, as the workloads' rollouts encode prompts, so a text prompt here is the
        # same tokens it is in training and evaluation.
        return [self.tokenizer.encode(text, bos=True) for text in texts]

    def _token_prompt(self, tokens: list[int]) -> list[int]:
        # The engine takes ids as they are; one outside the embedding would fail its step,
        # which stops the engine for every request.
        vocab = self.tokenizer.vocab_size
        for token in tokens:
            if not 0 <= token < vocab:
                raise InvalidParameter(
                    "prompt", f"token id {token} is outside the vocabulary (0 to {vocab - 1})"
                )
        return tokens

    def _start(self, prompts: list[list[int]], params: SamplingParams) -> "_Generation":
        if not self.engine.healthy:
            raise EngineStopped("the engine is not running")
        return _Generation(self.engine, prompts, params, self.metrics.timer())

    # -- streams ---------------------------------------------------------------------------

    async def _completion_chunks(
        self, request: CompletionRequest, generation: "_Generation", head: dict[str, Any]
    ) -> AsyncGenerator[str, None]:
        async with contextlib.aclosing(generation.updates()) as updates:
            async for choice in updates:
                taken = choice.take(self.tokenizer, generation.params.stop)
                if taken is None:
                    continue
                text, start = taken
                chunk = CompletionChoice(
                    index=choice.index,
                    text=text,
                    logprobs=self._completion_logprobs(choice, start)
                    if request.logprobs is not None
                    else None,
                    finish_reason=choice.finish_reason,
                    token_ids=choice.tokens[start:] if request.return_token_ids else None,
                    prompt_token_ids=choice.prompt
                    if request.return_token_ids and start == 0
                    else None,
                )
                yield CompletionResponse(**head, choices=[chunk]).model_dump_json()
        if request.include_usage:
            usage = CompletionResponse(**head, choices=[], usage=generation.usage)
            yield usage.model_dump_json()

    async def _chat_chunks(
        self, request: ChatCompletionRequest, generation: "_Generation", head: dict[str, Any]
    ) -> AsyncGenerator[str, None]:
        for choice in generation.choices:
            opening = ChatChunkChoice(index=choice.index, delta=ChatDelta(role="assistant"))
            yield ChatCompletionChunk(
                **head,
                choices=[opening],
                prompt_token_ids=choice.prompt
                if request.return_token_ids and choice.index == 0
                else None,
            ).model_dump_json()
        async with contextlib.aclosing(generation.updates()) as updates:
            async for choice in updates:
                taken = choice.take(self.tokenizer, generation.params.stop)
                if taken is None:
                    continue
                text, start = taken
                chunk = ChatChunkChoice(
                    index=choice.index,
                    delta=ChatDelta(content=text or None),
                    logprobs=self._chat_logprobs(choice, start) if request.logprobs else None,
                    finish_reason=choice.finish_reason,
                    token_ids=choice.tokens[start:] if request.return_token_ids else None,
                )
                yield ChatCompletionChunk(**head, choices=[chunk]).model_dump_json()
        if request.include_usage:
            usage = ChatCompletionChunk(**head, choices=[], usage=generation.usage)
            yield usage.model_dump_json()

    # -- logprobs --------------------------------------------------------------------------

    def _completion_logprobs(self, choice: "_Choice", start: int) -> CompletionLogprobs:
        """The legacy format, for the choice's tokens from `start` on."""
        texts = [self.token_text(token) for token in choice.tokens]
        # Offsets count token texts, as vLLM does: a byte of a multi-byte character has a
        # text of its own (U+FFFD) that the decoded completion does not.
        offset = sum(len(text) for text in texts[:start])
        tokens, offsets, tops = [], [], []
        for text, logprob in zip(texts[start:], choice.logprobs[start:], strict=True):
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            top = {self.token_text(token): value for token, value in logprob.top}
            top.setdefault(text, logprob.logprob)
            tops.append(top)
        return CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[logprob.logprob for logprob in choice.logprobs[start:]],
            top_logprobs=tops,
            text_offset=offsets,
        )

    def _chat_logprobs(self, choice: "_Choice", start: int) -> ChatLogprobs:
        return ChatLogprobs(content=[self._chat_logprob(lp) for lp in choice.logprobs[start:]])

    def _chat_logprob(self, logprob: TokenLogprob) -> ChatLogprob:
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


@dataclass
class _Choice:
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
        ready = self.text(tokenizer) if finished else _settled(tokenizer.decode(self.tokens), stops)
        if len(ready) <= self.streamed_chars and not finished:
            return None
        text = ready[self.streamed_chars :]
        start = self.streamed_tokens
        self.streamed_chars = max(self.streamed_chars, len(ready))
        self.streamed_tokens = len(self.tokens)
        return text, start


def _settled(text: str, stops: Sequence[str]) -> str:
    """The part of a growing completion's text that more tokens cannot change: without a
    trailing U+FFFD (the rest of its bytes may come) and without a tail that could be the
    start of a stop string (the engine cuts the text there if the rest comes)."""
    text = text.rstrip(_INCOMPLETE)
    held = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:length]):
                held = length
                break
    return text[: len(text) - held]


class _Generation:
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
            _Choice(index=p * params.n + i, prompt=prompt)
            for p, prompt in enumerate(prompts)
            for i in range(params.n)
        ]

    async def updates(self) -> AsyncGenerator[_Choice, None]:
        """Each choice as a token reaches it, until all have finished; leaving early (a
        client that went away) aborts the engine requests."""
        try:
            async with contextlib.aclosing(
                _merged(self.engine, self.prompts, self.params)
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


async def _merged(
    engine: AsyncEngine, prompts: list[list[int]], params: SamplingParams
) -> AsyncGenerator[tuple[int, Delta], None]:
    """(prompt index, delta) of one engine request per prompt, as they come. Closing this
    cancels the requests' tasks, and a cancelled `engine.generate` aborts its request."""
    queue: asyncio.Queue[tuple[int, Delta] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, prompt: list[int]) -> None:
        try:
            # `generate` is an async generator (annotated as an iterator): closing it is
            # what aborts the request.
            stream = cast(AsyncGenerator[Delta, None], engine.generate(prompt, params))
            async with contextlib.aclosing(stream) as deltas:
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


async def _unless_client_leaves(http: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` unless the client goes away first, which cancels it (and so aborts its
    engine requests: nobody would read their tokens); whether it ran to the end."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(http))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False
    task.result()  # its exception, if it raised one
    return True


async def _disconnect(http: Request) -> None:
    # The body has been read: what the server sends next is the client going away.
    while (await http.receive())["type"] != "http.disconnect":
        pass


def _event_stream(chunks: AsyncGenerator[str, None]) -> Response:
    """Server-sent events as OpenAI sends them: `data: <json>` each, then `data: [DONE]`."""

    async def events() -> AsyncGenerator[str, None]:
        try:
            async with contextlib.aclosing(chunks) as body:
                async for chunk in body:
                    yield chunk
        except EngineStopped as exc:
            # The status line went out with the first chunk; the error travels as an event.
            yield _error_body(str(exc), type="server_error").model_dump_json()
        yield "[DONE]"

    response: Response = EventSourceResponse(events(), sep="\n")
    return response


def _json(body: Any) -> Response:
    return Response(body.model_dump_json(), media_type="application/json")


# -- authentication and errors -------------------------------------------------------------


class _ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code


def _bearer(keys: list[bytes]) -> Callable[..., Coroutine[Any, Any, None]]:
    async def require_key(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise _ApiError(
                401,
                "no API key; send it as the header 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
        candidate = given.strip().encode()
        # Every key compared, each in constant time: the answer's timing tells nothing.
        matched = [hmac.compare_digest(candidate, key) for key in keys]
        if not any(matched):
            raise _ApiError(
                401, "the API key is not one this server accepts", code="invalid_api_key"
            )

    return require_key


def _error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> ErrorResponse:
    return ErrorResponse(error=ErrorDetail(message=message, type=type, param=param, code=code))


def _error(status: int, body: ErrorResponse, headers: dict[str, str] | None = None) -> Response:
    return Response(
        body.model_dump_json(), status_code=status, media_type="application/json", headers=headers
    )


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    body = _error_body(exc.message, type=exc.type, param=exc.param, code=exc.code)
    return _error(exc.status, body, headers)


async def _invalid_parameter(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidParameter)
    return _error(400, _error_body(str(exc), param=exc.field))


async def _invalid_request(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    messages, param = [], None
    for error in errors[:3]:
        location = list(error.get("loc", ()))
        if location[:1] == ["body"]:
            location = location[1:]
        if param is None and location and isinstance(location[0], str):
            param = location[0]
        where = ".".join(str(part) for part in location) or "body"
        message = f"{where}: {error.get('msg', 'invalid')}"
        if error.get("type") not in ("missing", "json_invalid"):
            message += f", got {_short(error.get('input'))}"
        messages.append(message)
    if len(errors) > len(messages):
        messages.append(f"and {len(errors) - len(messages)} more")
    return _error(400, _error_body("; ".join(messages), param=param))


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    body = _error_body(str(exc.detail), code=str(exc.status_code))
    return _error(exc.status_code, body, dict(exc.headers) if exc.headers else None)


async def _engine_stopped(_request: Request, exc: Exception) -> Response:
    body = _error_body(f"{exc}; try again later", type="server_error")
    return _error(503, body, {"Retry-After": "5"})


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
