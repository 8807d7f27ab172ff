"""The OpenAI API's bodies, as the server reads and writes them, and what a request asks of
the engine (`completion_sampling_params`, `chat_sampling_params`).

Requests follow OpenAI's fields plus vLLM's extensions that RL clients rely on (`top_k`,
`ignore_eos`, `return_token_ids`). A field that would change the output and that the engine
cannot honour (penalties, `logit_bias`, tools, ...) is refused, not silently ignored.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crucible.config.engine import ServeLimits
from crucible.config.sampling import MAX_TOP_LOGPROBS, InvalidParameter, SamplingParams

MAX_COMPLETION_LOGPROBS = 5
"""Alternatives per token the legacy completions API returns, at most (OpenAI's limit)."""

MAX_N = 128
"""Choices per request, at most (OpenAI's limit)."""

_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "echo": (False,),
    "best_of": (1,),
    "suffix": ("",),
    "logit_bias": ({},),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "tools": ([],),
    "functions": ([],),
    "response_format": ({"type": "text"},),
}
"""Fields the engine does not implement, with the values that ask for nothing (None also)."""


class StreamOptions(BaseModel):
    include_usage: bool = False
    """Send a last chunk with the request's token counts (and no choices)."""


class _Request(BaseModel):
    # Unknown fields are kept so that `_refuse_unsupported` can see them; the rest (user,
    # metadata, ...) change nothing the engine does.
    model_config = ConfigDict(extra="allow")

    model: str
    temperature: float | None = None
    """Softmax temperature; 0 is greedy. Unset: 1."""

    top_p: float | None = None
    """Nucleus sampling mass. Unset: 1 (off)."""

    top_k: int | None = None
    """vLLM's extension: keep the k most likely tokens; 0 or -1 is off."""

    n: int = Field(default=1, le=MAX_N)
    seed: int | None = None
    """The same request with the same seed gets the same completions."""

    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    """vLLM's extension: keep generating after EOS (fixed-length completions)."""

    return_token_ids: bool = False
    """vLLM's extension: each choice carries its token ids (`token_ids`), and the prompt's
    (`prompt_token_ids`), so an RL client scores exactly the tokens that were sampled."""

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    """One text, several texts (a choice set for each), or one prompt as token ids."""

    max_tokens: int | None = None
    """Unset: 16, as OpenAI's default."""

    logprobs: int | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    """Return each token's logprob and this many most likely alternatives."""


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    """Deprecated by OpenAI for `max_completion_tokens`, which wins when both are given."""

    max_completion_tokens: int | None = None
    """Unset: as many as the model's context leaves after the prompt."""

    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    """Alternatives per token (with `logprobs`)."""

    @property
    def max_tokens_field(self) -> str:
        """The field a too-long completion is blamed on: the one the client set."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    def template_messages(self) -> list[dict[str, str]]:
        """The messages as chat templates read them: role and text content."""
        return [{"role": m.role, "content": m.text} for m in self.messages]


def check_bounds(request: CompletionRequest | ChatCompletionRequest, limits: ServeLimits) -> None:
    """Refuse a request that asks for more than `limits` allow, naming the field and the
    bound, before any of its text is tokenized or rendered."""
    prompts = 1
    if isinstance(request, CompletionRequest) and isinstance(request.prompt, list):
        if request.prompt and isinstance(request.prompt[0], str):
            prompts = len(request.prompt)
        if prompts > limits.max_prompts:
            raise InvalidParameter(
                "prompt",
                f"holds {prompts} prompts, more than the {limits.max_prompts} this server "
                "takes in one request; send them in several requests",
            )
    if prompts * request.n > limits.max_choices:
        raise InvalidParameter(
            "n",
            f"{prompts} prompts x n={request.n} ask for {prompts * request.n} completions, "
            f"more than the {limits.max_choices} this server starts for one request",
        )
    stops = _stops(request.stop)
    if len(stops) > limits.max_stops:
        raise InvalidParameter(
            "stop", f"holds {len(stops)} strings, more than the {limits.max_stops} allowed"
        )
    longest = max((len(stop) for stop in stops), default=0)
    if longest > limits.max_stop_chars:
        raise InvalidParameter(
            "stop",
            f"holds a string of {longest} characters, more than the {limits.max_stop_chars} "
            "allowed",
        )
    if isinstance(request, ChatCompletionRequest):
        _check_messages(request, limits)
        field, max_tokens = request.max_tokens_field, request.max_completion_tokens
        if max_tokens is None:
            max_tokens = request.max_tokens
    else:
        field, max_tokens = "max_tokens", request.max_tokens
    if limits.max_tokens is not None and max_tokens is not None and max_tokens > limits.max_tokens:
        raise InvalidParameter(
            field, f"is {max_tokens}, more than the {limits.max_tokens} this server allows"
        )


def _check_messages(request: ChatCompletionRequest, limits: ServeLimits) -> None:
    if len(request.messages) > limits.max_messages:
        raise InvalidParameter(
            "messages",
            f"holds {len(request.messages)} messages, more than the {limits.max_messages} "
            "this server takes in one request",
        )
    for position, message in enumerate(request.messages):
        if isinstance(message.content, list) and len(message.content) > limits.max_messages:
            raise InvalidParameter(
                "messages",
                f"message {position} holds {len(message.content)} content parts, more than "
                f"the {limits.max_messages} allowed",
            )


def completion_sampling_params(request: CompletionRequest) -> SamplingParams:
    """What a completions request asks of the engine; `InvalidParameter` names its field."""
    _refuse_unsupported(request)
    return SamplingParams(
        max_tokens=16 if request.max_tokens is None else request.max_tokens,
        temperature=_or(request.temperature, 1.0),
        top_p=_or(request.top_p, 1.0),
        top_k=_top_k(request.top_k),
        seed=request.seed,
        n=request.n,
        stop=_stops(request.stop),
        ignore_eos=request.ignore_eos,
        top_logprobs=request.logprobs or 0,
    )


def chat_sampling_params(request: ChatCompletionRequest, *, room: int) -> SamplingParams:
    """What a chat request asks of the engine, `room` being the tokens the context has left
    after the prompt (the default length); `InvalidParameter` names the request's field."""
    _refuse_unsupported(request)
    if request.top_logprobs and not request.logprobs:
        raise InvalidParameter(
            "top_logprobs", f"needs logprobs=true, got top_logprobs={request.top_logprobs}"
        )
    max_tokens = request.max_completion_tokens
    if max_tokens is None:
        max_tokens = request.max_tokens if request.max_tokens is not None else room
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=_or(request.temperature, 1.0),
            top_p=_or(request.top_p, 1.0),
            top_k=_top_k(request.top_k),
            seed=request.seed,
            n=request.n,
            stop=_stops(request.stop),
            ignore_eos=request.ignore_eos,
            top_logprobs=(request.top_logprobs or 0) if request.logprobs else 0,
        )
    except InvalidParameter as exc:
        raise chat_error(request, exc) from None


def chat_error(request: ChatCompletionRequest, exc: InvalidParameter) -> InvalidParameter:
    """The engine's error under the name the chat API gives the field."""
    renamed = {"max_tokens": request.max_tokens_field, "logprobs": "top_logprobs"}
    if exc.field not in renamed:
        return exc
    return InvalidParameter(renamed[exc.field], exc.message)


def _refuse_unsupported(request: _Request) -> None:
    for name, value in (request.model_extra or {}).items():
        if name in _NEUTRAL and value is not None and value not in _NEUTRAL[name]:
            # Cut short: a refused field may be as large as the body (a logit_bias of every
            # token), and the refusal must not echo all of it back.
            shown = repr(value)
            shown = shown if len(shown) <= 100 else shown[:97] + "..."
            raise InvalidParameter(name, f"is not supported by this server, got {shown}")


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _top_k(top_k: int | None) -> int:
    if top_k is None or top_k == -1:
        return 0
    if top_k < -1:
        raise InvalidParameter("top_k", f"must be -1 or 0 (off) or positive, got {top_k}")
    # Past the vocabulary every k keeps every token; capped, it fits the sampler's int64.
    return min(top_k, 2**31)


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


# -- responses ------------------------------------------------------------------------------


def _extension() -> Any:
    """An extension field, left out of the body when unset, as OpenAI's clients expect."""
    return Field(default=None, exclude_if=lambda value: value is None)


class Usage(BaseModel):
    prompt_tokens: int
    """Each prompt counted once, whatever `n` is."""

    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    """The sampled token and the most likely alternatives, by token text."""

    text_offset: list[int]
    """Where each token starts: the sum of the lengths of the tokens' texts before it."""


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = _extension()
    prompt_token_ids: list[int] | None = _extension()


class CompletionResponse(BaseModel):
    """A completions response, and each chunk of a streamed one."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatLogprob] | None


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None
    token_ids: list[int] | None = _extension()


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    prompt_token_ids: list[int] | None = _extension()


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = _extension()
    content: str | None = _extension()


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = _extension()


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = _extension()


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    max_model_len: int
    """vLLM's extension: the longest prompt plus completion the server takes."""
    root: str | None = None
    """vLLM's extension: what the model is loaded from (for Crucible, `checkpoint-<id>`)."""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    """The request field at fault."""

    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
